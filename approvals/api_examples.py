"""Examples of every body of the REST API (/api/v1/), for its OpenAPI schema: each request body
and each response with content has at least one, taken from real answers of the demo's
deployer (tests/approvals/test_openapi.py checks every example against its schema, and the
schema against real answers)."""

from typing import Any

from drf_spectacular.utils import OpenApiExample

TIME = "2026-10-06T09:14:03.512211Z"
LATER = "2026-10-06T09:16:40.104338Z"
HASH = "4a954b58ec2c0d494318cc4d2479e6a30989d4a0491d70e75cf2a73a75097d9a"
HASH_2 = "d47ee193e305faf9f4127bc90fff8665d837531f0bbac4f45fb5faf5da4e4d62"
ARGUMENTS = {"build": "2026.10.06-1", "environment": "staging"}

INTERACTION: dict[str, Any] = {
    "id": "eff_Gc08GN1b-OtNANvW",
    "kind": "approval",
    "state": "open",
    "prompt": "Approve deploy / deploy_build?",
    "detail": {
        "server": "deploy",
        "tool": "deploy_build",
        "reason": "Deployments change what customers run.",
    },
    "choices": [],
    "allowCustom": True,
    "agent": "deployer",
    "taskId": "t1._vHrNvmZHimjsXTHIP6s7Q",
    "contextId": "fc5fb59c-7aec-4fb8-b36c-354cb0708a0b",
    "subject": "partner:demo-client",
    "deciders": "operators",
    "approvers": ["admin", "operator"],
    "approvalsRequired": 1,
    "approvals": [],
    "createdAt": TIME,
    "expiresAt": "2026-10-07T09:14:03.512190Z",
    "answer": None,
    "answeredBy": "",
    "answeredVia": "",
    "answeredAt": None,
    "heldCall": {
        "server": "deploy",
        "tool": "deploy_build",
        "arguments": ARGUMENTS,
        "summary": "Deploy 2026.10.06-1 to staging",
        "impact": "",
    },
    "groupId": None,
}
HELD_BY = {
    "entry": "deploy/deploy_build",
    "rule": 2,
    "title": "Deploy {build} to {environment}",
    "when": [],
    "source": "policy",
    "version": "78a04cddad9ff00830d7195cf58e21c9fee9dbdafd54901de998a68f10f5b7e3",
    "label": "deploy/deploy_build, rule 2 of 2 (Deploy {build} to {environment}): the default rule",
}
DETAIL = {
    **INTERACTION,
    "heldCall": {**INTERACTION["heldCall"], "argumentsHash": HASH, "state": "held"},
    "heldBy": HELD_BY,
    "openedUnder": None,
    "progress": None,
    "stage": None,
    "stages": [],
}
FACTS = {
    **DETAIL,
    "decision": {
        "mayDecide": True,
        "refusal": None,
        "mayApprove": True,
        "approveRefusal": None,
        "stepUpRequired": False,
        "riskHigh": False,
        "editable": False,
        "approvedAlready": False,
        "allowSimilar": True,
        "allowSimilarRefusal": None,
        "next": "Your approval sends deploy / deploy_build.",
    },
}
ANSWERED = {
    **DETAIL,
    "state": "answered",
    "answer": {"approved": True, "reason": "staging is free"},
    "answeredBy": "program:demo-operator",
    "answeredVia": "rest",
    "answeredAt": LATER,
}
RULE = {
    "id": "rule_QdUZjZzgSIvD4Pck",
    "agent": "deployer",
    "server": "deploy",
    "tool": "deploy_build",
    "caller": "partner:demo-client",
    "conditions": [{"field": "environment", "op": "equals", "value": "staging"}],
    "createdBy": "program:demo-operator",
    "createdFrom": "eff_Gc08GN1b-OtNANvW",
    "createdAt": LATER,
    "expiresAt": "2026-10-07T09:16:40.104120Z",
    "revokedAt": None,
    "revokedBy": "",
    "uses": 3,
    "active": True,
    "madeUnder": HELD_BY["label"],
    "inapplicableReason": None,
    "inapplicableSince": None,
}
PRODUCTION_CALL = {
    **FACTS,
    "id": "eff_a7jbmBc8uF4P48S0",
    "groupId": "grp_4HXzZ-83WQkmA2ZJ",
    "heldCall": {
        "server": "deploy",
        "tool": "deploy_build",
        "arguments": {"build": "2026.10.06-1", "environment": "production"},
        "summary": "Deploy 2026.10.06-1 to production",
        "impact": "Replaces what customers run in production with build 2026.10.06-1",
        "argumentsHash": HASH_2,
        "state": "held",
    },
}
GROUP: dict[str, Any] = {
    "id": "grp_4HXzZ-83WQkmA2ZJ",
    "state": "open",
    "taskId": "t1.9sMcl7k5JHziSowi823fIA",
    "agent": "deployer",
    "interactions": [{**FACTS, "groupId": "grp_4HXzZ-83WQkmA2ZJ"}, PRODUCTION_CALL],
    "decision": {
        "mayDecide": True,
        "refusal": None,
        "mayApprove": True,
        "approveRefusal": None,
        "stepUpRequired": False,
    },
}


def example(name: str, value, *, status: int | None = None, request: bool = False, summary=""):
    return OpenApiExample(
        name,
        value=value,
        summary=summary or name,
        request_only=request,
        response_only=not request,
        status_codes=[str(status)] if status is not None else None,
    )


# The refusals every operation shares, with what each status means here.
REFUSED = {
    400: example(
        "Not a valid body",
        {
            "detail": "value: Required for a question: the answer.",
            "field": "value",
            "errors": {"value": ["Required for a question: the answer."]},
        },
        status=400,
    ),
    403: example(
        "A partner token",
        {
            "detail": "This is a partner token: it calls agents over A2A; the REST API takes "
            "operator tokens."
        },
        status=403,
    ),
    404: example("Not found (or another tenant's)", {"detail": "No such interaction."}, status=404),
    415: example(
        "Not JSON",
        {"detail": 'Unsupported media type "text/plain" in request.'},
        status=415,
    ),
}
DECIDED_FIRST = example(
    "Someone else decided first",
    {
        "detail": "Interaction eff_Gc08GN1b-OtNANvW was already answered by "
        "user:alice@demo.test at 2026-10-06T09:15:12.000000+00:00; this answer was not applied.",
        "state": "answered",
        "answeredBy": "user:alice@demo.test",
        "answeredVia": "page",
        "answeredAt": "2026-10-06T09:15:12Z",
    },
    status=409,
)


def refusals(*statuses: int) -> list[OpenApiExample]:
    return [REFUSED[status] for status in statuses]


INTERACTIONS_LIST = [
    example(
        "A page of open approvals",
        {
            "next": "https://countersign.example/api/v1/interactions?state=open&cursor=cD0yMDI2",
            "previous": None,
            "results": [INTERACTION],
        },
        status=200,
    ),
    example(
        "An unknown state",
        {
            "detail": 'state: "sideways" is not a valid choice.',
            "field": "state",
            "errors": {"state": ['"sideways" is not a valid choice.']},
        },
        status=400,
    ),
    REFUSED[403],
]
NOT_ALLOWED = example(
    "Not yours to decide",
    {"detail": "Only admins may decide this approval.", "reason": "DECIDER_NOT_ALLOWED"},
    status=403,
)
STEP_UP = example(
    "A step-up is needed",
    {
        "detail": "deploy / deploy_build is marked risk: high: approving it needs a recent "
        "re-authentication (in the browser: confirm your password, and your authenticator code "
        "when you have one) or an operator token created with the step-up right.",
        "reason": "STEP_UP_REQUIRED",
    },
    status=403,
)
INTERACTION_DETAIL = [
    example("An open approval", FACTS, status=200),
    *refusals(403, 404),
]
INTERACTION_ANSWER = [
    example(
        "Approve what you were shown",
        {"approved": True, "reason": "staging is free", "argumentsHash": HASH},
        request=True,
    ),
    example("Deny", {"approved": False, "reason": "not on a Friday"}, request=True),
    example("Answer a question", {"value": "main"}, request=True),
    example(
        "Approve and allow similar calls",
        {
            "approved": True,
            "reason": "staging deploys are fine today",
            "argumentsHash": HASH,
            "allowSimilar": {
                "duration": "1d",
                "callerOnly": True,
                "conditions": [{"field": "environment", "op": "equals", "value": "staging"}],
            },
        },
        request=True,
    ),
    example(
        "Edit, then approve",
        {
            "approved": True,
            "reason": "the newer build",
            "arguments": {"build": "2026.10.06-2", "environment": "staging"},
        },
        request=True,
    ),
    example("Approved", ANSWERED, status=200),
    *refusals(400, 404, 415),
    NOT_ALLOWED,
    STEP_UP,
    DECIDED_FIRST,
]
GROUP_DETAIL = [example("Two calls of one reply", GROUP, status=200), *refusals(403)]
GROUP_DETAIL.append(example("No such group", {"detail": "No such group."}, status=404))
GROUP_ANSWER = [
    example(
        "Deny both calls",
        {
            "approved": False,
            "reason": "not today",
            "argumentsHashes": {"eff_Gc08GN1b-OtNANvW": HASH, "eff_a7jbmBc8uF4P48S0": HASH_2},
        },
        request=True,
    ),
    example(
        "Denied",
        {
            **GROUP,
            "state": "decided",
            "interactions": [
                {
                    **call,
                    "state": "answered",
                    "answer": {"approved": False, "reason": "not today"},
                    "answeredBy": "program:demo-operator",
                    "answeredVia": "rest",
                    "answeredAt": LATER,
                }
                for call in GROUP["interactions"]
            ],
        },
        status=200,
    ),
    example(
        "A call left out",
        {
            "detail": "argumentsHashes: eff_a7jbmBc8uF4P48S0 is open and was not shown.",
            "field": "argumentsHashes",
        },
        status=400,
    ),
    NOT_ALLOWED,
    REFUSED[415],
    example("No such group", {"detail": "No such group."}, status=404),
    DECIDED_FIRST,
]
TASK_CANCEL = [
    example("Stop it, saying why", {"reason": "not needed any more"}, request=True),
    example(
        "Canceled",
        {
            "id": "t1._m-GrUCyXV6x85RH3V8-xw",
            "agent": "code-reviewer",
            "caller": "partner:demo-client",
            "state": "TASK_STATE_CANCELED",
            "message": "Canceled by an operator: not needed any more",
            "updatedAt": LATER,
        },
        status=200,
    ),
    example(
        "No reason",
        {
            "detail": "reason: This field is required.",
            "field": "reason",
            "errors": {"reason": ["This field is required."]},
        },
        status=400,
    ),
    REFUSED[403],
    example(
        "No such task", {"detail": "Task t1._m-GrUCyXV6x85RH3V8-xw was not found."}, status=404
    ),
    example(
        "Ended already",
        {"detail": "Task t1._m-GrUCyXV6x85RH3V8-xw is completed and can no longer be canceled."},
        status=409,
    ),
]
# A list's example is one item: drf-spectacular writes it as the list of that item.
RULES_LIST = [example("One rule", RULE, status=200), REFUSED[403]]
RULE_REVOKE = [
    example(
        "Revoked",
        {**RULE, "active": False, "revokedAt": LATER, "revokedBy": "program:demo-operator"},
        status=200,
    ),
    REFUSED[403],
    example("No such rule", {"detail": "No such rule."}, status=404),
    example(
        "Revoked already",
        {"detail": "Rule rule_QdUZjZzgSIvD4Pck was already revoked by user:alice@demo.test."},
        status=409,
    ),
]
INTERACTION_EXTEND = [
    example("Thirty minutes more", {"by": "30m"}, request=True),
    example("Extended", {**DETAIL, "expiresAt": "2026-10-06T10:15:00Z"}, status=200),
    example(
        "Too long",
        {
            "detail": "an item's deadline is extended by at most 1440 minutes in all (1410 left)",
            "field": "by",
        },
        status=400,
    ),
    NOT_ALLOWED,
    DECIDED_FIRST,
    *refusals(404, 415),
]
