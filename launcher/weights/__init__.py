"""Model weights on the hosts of a deployment: which dirs each host needs (``needs``), their
manifests (``manifest``), who sends what to whom (``spread``), the per-run host-to-host keys
(``auth``), and staging and verifying over SSH (``stage``).  See docs/weights.md."""
