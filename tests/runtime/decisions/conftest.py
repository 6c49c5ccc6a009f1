"""Fixtures the tests of the decisions (runtime/decisions/) share."""

import pytest

from tests.core import DEPLOY_TOOL, REPORT_RESULT, deploy_step


@pytest.fixture
def deployer(make_agent):
    """Make the agent ``dep`` (unless told) whose model deploys ``build`` (the caller's text
    unless told) to ``environment``, its deploy under the policy entry ``policy``."""

    def make(
        policy="approve",
        *,
        slug="dep",
        build="{{ text }}",
        environment="staging",
        tenant=None,
    ):
        return make_agent(
            slug,
            [deploy_step(environment, build=build), *REPORT_RESULT],
            tenant=tenant,
            tools=[DEPLOY_TOOL],
            tool_policy={"deploy/deploy_build": policy},
        )

    return make
