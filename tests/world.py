"""The world of the shared fixtures: two tenants, each with an admin, an operator, a viewer
and a partner token, as the house style asks."""

from dataclasses import dataclass, field

from django.test import Client

from tenants.models import Membership, Tenant, User
from tenants.tokens import api_token_create

PASSWORD = "correct-horse-battery-staple"


@dataclass
class Side:
    tenant: Tenant
    admin: User
    operator: User
    viewer: User
    token: str
    subject: str
    extra: dict = field(default_factory=dict)

    def client_for(self, user: User) -> Client:
        client = Client()
        client.force_login(user)
        return client


@dataclass
class World:
    a: Side
    b: Side


def make_side(slug: str) -> Side:
    tenant = Tenant.objects.create(slug=slug, name=f"{slug.title()} Corp")
    users = {}
    for role in ("admin", "operator", "viewer"):
        user = User.objects.create_user(email=f"{role}@{slug}.test", password=PASSWORD)
        Membership.objects.create(tenant=tenant, user=user, role=role)
        users[role] = user
    subject = f"partner:{slug}-client"
    _, token = api_token_create(tenant=tenant, subject=subject, name=f"{slug} partner")
    return Side(tenant=tenant, token=token, subject=subject, **users)
