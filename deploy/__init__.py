"""Production configuration: the Kubernetes code location and the files docs/DEPLOY.md explains."""
