"""The demo catalog: ``github`` (pasted token) and ``google-drive`` (OAuth2)."""

from allauth.socialaccount.models import SocialApp
from django.db import transaction

from connections.models import App

GOOGLE_DRIVE_SOCIAL_APP = "Google Drive (Countersign connection)"


@transaction.atomic
def seed_demo_apps() -> list[str]:
    """Create the demo catalog apps if missing (idempotent, never overwrites admin edits)."""
    App.objects.get_or_create(
        slug="github",
        defaults={
            "name": "GitHub",
            "method": App.Method.TOKEN,
            "description": "Repositories and pull requests, for the coder agent's "
            "github / create_pull_request tool.",
            "token_help": "A fine-grained personal access token with Contents and Pull "
            "requests read and write on the repositories the agents may change.",
        },
    )
    drive = App.objects.filter(slug="google-drive").first()
    if drive is None:
        # A placeholder with no client credentials: the page says the app is not set up
        # until an admin fills them in, so the demo needs no Google project to run.
        social_app = SocialApp.objects.filter(name=GOOGLE_DRIVE_SOCIAL_APP).first()
        if social_app is None:
            social_app = SocialApp.objects.create(
                provider="openid_connect",
                provider_id="google-drive",
                name=GOOGLE_DRIVE_SOCIAL_APP,
                client_id="",
                secret="",
                settings={
                    "server_url": "https://accounts.google.com",
                    # Offline access with consent, so that Google sends a refresh token.
                    "auth_params": {"access_type": "offline", "prompt": "consent"},
                },
            )
        App.objects.create(
            slug="google-drive",
            name="Google Drive",
            method=App.Method.OAUTH2,
            social_app=social_app,
            scopes="openid email https://www.googleapis.com/auth/drive.file",
            description="Files the agents create or open in the tenant's Google Drive. "
            "Before it can be connected, a tenant admin sets the tenant's OAuth app (Django "
            "admin → OAuth apps of the tenant: the client id and secret of a Google Cloud "
            "OAuth client whose redirect URI is <site>/connections/oauth/callback); platform "
            f"staff may set a default for every tenant in the social application "
            f"{GOOGLE_DRIVE_SOCIAL_APP!r}.",
        )
    return ["github", "google-drive"]
