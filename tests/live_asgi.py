"""The live stack's web application: the project's (config.asgi), which forgets the content
types' ids it knows before each request.

The stack outlives the tests, and each transactional test ends with a flush that deletes
every row, content types too; the flush's post_migrate makes them again under new ids (the
flush keeps the sequences going). A server that kept the old ids (Django's ContentTypeManager
caches them per process) wrote the next admin save's log entry with an id gone: a foreign-key
violation, a 500, in the second browser test of a session that saved in Django admin. Reading
them once more per request costs a query per model on an admin page, in tests only.
"""

from django.apps import apps

from config.asgi import application as project_application

# Looked up once config.asgi has set Django up (a models import cannot come before it).
ContentType = apps.get_model("contenttypes", "ContentType")


async def application(scope, receive, send):
    if scope["type"] == "http":
        ContentType.objects.clear_cache()
    await project_application(scope, receive, send)
