"""The sampling layer: the poll loop that reads the devices once per collect interval and hands each
snapshot to the exposition."""
