"""The tool policy: which rule holds a call (rules, lookup), its conditions, the syntax of
approvers, titles and ladders, the checks AGENT.md and admin run, a tool's trust keys and
who must approve (needs)."""
