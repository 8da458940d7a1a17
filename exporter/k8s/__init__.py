"""The Kubernetes layer: which pod and container holds each device, from the kubelet, the API
server, DRA claims or the container runtime."""
