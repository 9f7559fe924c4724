// Package deploy holds no code: its directory holds the files a Tollgate fleet is deployed
// and watched with (Kubernetes manifests built by kustomize, the NATS chart's values,
// Prometheus scrape configuration and rules, a Grafana dashboard), and its test checks
// them without a cluster.
package deploy
