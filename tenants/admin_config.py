"""Django admin's app, with the site of tenants.admin_scope. A module of its own: INSTALLED_APPS
imports it before any model is ready."""

from django.contrib.admin.apps import AdminConfig


class CountersignAdminConfig(AdminConfig):
    """django.contrib.admin with the tenant scoping of tenants.admin_scope (INSTALLED_APPS
    names this in place of django.contrib.admin)."""

    default_site = "tenants.admin_scope.CountersignAdminSite"
