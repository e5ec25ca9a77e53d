"""Authority (steps 6-7 and the cancellation clause): signed grants, gated publish/hand-off/registration,
verified reclaim and pre-cancel capture. Pure logic over the ports: what each action does is actions.py; when a
grant runs (admission, readiness, the claim) is runtime/authority_handlers."""
