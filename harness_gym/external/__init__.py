"""Real, unmodified agent CLIs as harnesses (issue 26).

The CLI runs inside the task's sandbox; the policy sits behind :class:`~harness_gym.external.proxy.ModelProxy`,
a host-side recording proxy that speaks each CLI's wire API and translates it to one canonical request
(:class:`~harness_gym.external.policies.PolicyRequest`).
"""
