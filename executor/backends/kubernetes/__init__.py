"""The Kubernetes backend: pods bound to the leased node through the official client."""
