"""What the node says about its GPUs' faults on the Kubernetes API server: a node condition,
Events and an opt-in taint, written off the poll thread from each published snapshot.

Every part is off by default. `config.py` holds the settings, `message.py` the condition's
message (which is also the durable record read back at start), `apihttp.py` the requests,
`condition.py`, `events.py` and `taints.py` what each write is, `writer.py` the thread that
makes them and `access.py` doctor's permission checks.
"""
