"""A held call of an MCP client through a gateway (runtime.gateway.held_calls)."""

from django.db import models
from django.db.models import Q
from django.utils import timezone

from runtime.agents.agent_models import Agent
from runtime.kernel.task_models import Task
from tenants.models import ApiToken, Tenant


class GatewayCall(models.Model):
    """One held ``tools/call`` of an MCP client: the turn that holds, decides and sends it,
    and who asked (the token, its subject, the client as ``initialize`` named it).

    The same call sent again (same tool, same arguments, same token) while the first one's
    outcome has not been handed to a client joins it instead of opening a second approval: a
    client that timed out or was cancelled and retries picks up the decision. The partial
    unique constraint is the database's word that two such calls never both open one.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    gateway = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+")
    token = models.ForeignKey(ApiToken, on_delete=models.CASCADE, related_name="+")
    subject = models.CharField(max_length=200)
    # SHA-256 of server, tool and the canonical arguments.
    call_key = models.CharField(max_length=64)
    server = models.CharField(max_length=100)
    tool = models.CharField(max_length=100)
    task = models.ForeignKey(Task, null=True, on_delete=models.CASCADE, related_name="+")
    client_name = models.CharField(max_length=200, blank=True)
    client_version = models.CharField(max_length=100, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    # When a client was handed its outcome (approved and sent, denied, expired, failed).
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["gateway", "token", "call_key"],
                condition=Q(delivered_at__isnull=True),
                name="gateway_call_one_undelivered",
            )
        ]

    def __str__(self) -> str:
        return f"{self.server}/{self.tool} for {self.subject}"
