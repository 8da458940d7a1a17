"""The HTTP layer: the `/metrics`, `/health` and `/ready` endpoints, with dcgm-exporter's web config
(TLS, basic authentication, rate limit) and limits on connections and scrapes."""
