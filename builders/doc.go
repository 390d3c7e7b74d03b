// Package builders turns a TrainingJob into the Kubernetes objects that run it: the workers' Indexed Job,
// the headless Service, the ConfigMap, the checkpoint claim and the PodGroup. Every function here is pure:
// no client, no clock, no I/O. The names and labels the objects carry come from package names.
package builders
