import pytest

from connections.services import (
    connection_connect_oauth,
    connection_connect_token,
    connection_disconnect,
)

pytestmark = pytest.mark.django_db


def test_connecting_tells_the_runtime_once_after_commit(
    world, github, runtime_hook, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks() as callbacks:
        connection_connect_token(
            tenant=world.a.tenant, app=github, token="ghp_x", by=world.a.operator
        )
        # Not before the commit: the resumed turn must find the connection.
        assert runtime_hook.call_count == 0
    assert len(callbacks) == 1
    callbacks[0]()
    runtime_hook.assert_called_once_with(
        tenant=world.a.tenant, app="github", by="user:operator@acme.test"
    )


def test_oauth_connect_tells_the_runtime_too(
    world, stub_app, runtime_hook, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        connection_connect_oauth(
            tenant=world.b.tenant,
            app=stub_app,
            access_token="at",
            refresh_token="rt",
            expires_in=60,
            by=world.b.admin,
        )
    runtime_hook.assert_called_once_with(
        tenant=world.b.tenant, app="stub-drive", by="user:admin@globex.test"
    )


def test_nothing_is_told_when_the_connect_is_refused_or_rolled_back(
    world, github, runtime_hook, django_capture_on_commit_callbacks
):
    from connections.services import ConnectError

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        with pytest.raises(ConnectError):
            connection_connect_token(
                tenant=world.a.tenant, app=github, token="  ", by=world.a.operator
            )
        connection_disconnect(tenant=world.a.tenant, app=github, by=world.a.operator)
    assert callbacks == []
    runtime_hook.assert_not_called()


def test_a_failing_runtime_hook_does_not_undo_the_connection(
    world, github, runtime_hook, django_capture_on_commit_callbacks
):
    from connections.selectors import connection_secret_for

    runtime_hook.side_effect = RuntimeError("runtime down")
    with django_capture_on_commit_callbacks(execute=True):
        connection_connect_token(
            tenant=world.a.tenant, app=github, token="ghp_x", by=world.a.operator
        )
    runtime_hook.assert_called_once()
    assert connection_secret_for(tenant=world.a.tenant, app_slug="github") == "ghp_x"
