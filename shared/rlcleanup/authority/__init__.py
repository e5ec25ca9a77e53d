"""Authority (steps 6-7 and the cancellation clause): signed grants, gated publish/hand-off/registration,
verified reclaim and pre-cancel capture. Pure logic over the ports; handlers live in runtime/authority_handlers."""
