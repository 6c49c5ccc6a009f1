"""Append-only rows: the audit log and decision receipts are written once, never changed or
deleted through the ORM (what they record can be trusted later). A base-layer module so that
every app's audit rows (runtime's decisions, connections' connection changes) share one
rule."""

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from django.db import models

# Set only inside ``retention_pruning`` (the pruner's block): the one path that deletes audit
# rows, those past the tenant's retention (runtime.kernel.audit_prune).
_pruning: ContextVar[bool] = ContextVar("countersign_retention_pruning", default=False)


class AppendOnlyError(Exception):
    """An audit row was about to be changed or deleted: the audit log is append-only."""


@contextmanager
def retention_pruning() -> Iterator[None]:
    """The sanctioned path for deleting append-only rows: a queryset's ``delete()`` inside this
    block removes its rows. Only the retention pruner uses it (a test keeps it so), after
    recording where the audit chain now starts; updates stay refused, here too."""
    token = _pruning.set(True)
    try:
        yield
    finally:
        _pruning.reset(token)


class AppendOnlyQuerySet(models.QuerySet):
    """Rows are added, never changed or removed (the audit log is append-only).

    ``update`` and ``delete`` refuse, so no service, admin action or shell one-liner can
    rewrite history through the ORM. Deleting a whole tenant still takes its rows with it
    (the foreign key's cascade, done by Django's collector below the QuerySet API), and the
    retention pruner deletes rows past the tenant's retention (``retention_pruning``).
    """

    def update(self, **kwargs):
        raise AppendOnlyError(f"{self.model.__name__} rows are append-only: no update.")

    def delete(self):
        if _pruning.get():
            return super().delete()
        raise AppendOnlyError(f"{self.model.__name__} rows are append-only: no delete.")

    # bulk_update is update() underneath; named so that the refusal says which call it was.
    def bulk_update(self, objs, fields, batch_size=None):
        raise AppendOnlyError(f"{self.model.__name__} rows are append-only: no bulk_update.")


class AppendOnlyModel(models.Model):
    """A model whose rows are written once (save refuses an existing row, delete refuses)."""

    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        abstract = True

    def save(self, *args, **kwargs):
        if self.pk is not None and not self._state.adding:
            raise AppendOnlyError(f"{type(self).__name__} rows are append-only: no update.")
        kwargs["force_insert"] = True
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise AppendOnlyError(f"{type(self).__name__} rows are append-only: no delete.")
