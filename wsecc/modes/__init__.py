"""The modes as values: one strategy per mode (`strategy`), beside each mode's own code —
training's step cost (`train`) and gradient check (`gradcheck`), generation's prefill and
decode plan (`generate`).
"""
