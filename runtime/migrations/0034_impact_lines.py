from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("runtime", "0029_help_texts_without_module_paths")]

    operations = [
        migrations.AddField(
            model_name="interaction",
            name="impact",
            field=models.CharField(blank=True, default="", editable=False, max_length=320),
        ),
        migrations.AddField(
            model_name="receipt",
            name="impact",
            field=models.CharField(
                blank=True, default="", help_text="What approving the call does.", max_length=320
            ),
        ),
    ]
