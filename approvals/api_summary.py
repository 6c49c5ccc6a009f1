"""An approval's model summary on the REST wire (runtime.decisions.call_summaries): its
body, and the field that reads it from the summaries a view passed in the context."""

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.fields import SkipField


class ModelSummarySerializer(serializers.Serializer):
    """A model's summary of a held call (the tenant's AI summaries), never the arguments."""

    text = serializers.CharField(help_text="The summary, written by a model: check it.")
    model = serializers.CharField(help_text="Which model wrote it.")
    flagged = serializers.BooleanField(
        help_text="The deterministic check found values in it that the arguments do not hold."
    )
    problems = serializers.ListField(
        child=serializers.CharField(), help_text="Those values, as the summary names them."
    )


@extend_schema_field(ModelSummarySerializer)
class ModelSummaryField(serializers.Field):
    """An approval's model summary, read from the summaries the view passed in the context
    (one query a page); absent from the body when there is none."""

    def get_attribute(self, instance):
        found = (self.context.get("summaries") or {}).get(instance.pk)
        if found is None:
            raise SkipField
        return found

    def to_representation(self, value) -> dict:
        return value.wire()
