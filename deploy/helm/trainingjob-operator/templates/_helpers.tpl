{{/* The name of every object: the release's name, or release-chart when the release name lacks the chart's. */}}
{{- define "trainingjob-operator.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The selector of the operator's pods (as in deploy/). */}}
{{- define "trainingjob-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
{{- end -}}

{{/* Helm's labels of every object; the objects deploy/ labels with the selector also get that (labels). */}}
{{- define "trainingjob-operator.helmLabels" -}}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "trainingjob-operator.labels" -}}
{{ include "trainingjob-operator.selectorLabels" . }}
{{ include "trainingjob-operator.helmLabels" . }}
{{- end -}}

{{/* The manager's flags: deploy/'s, then one per value set. */}}
{{- define "trainingjob-operator.args" -}}
{{- if .Values.leaderElection.enabled }}
- --leader-elect
{{- end }}
- --metrics-bind-address=:8443
{{- if .Values.metrics.insecureHTTP }}
- --metrics-insecure-http
{{- end }}
{{- if .Values.metrics.certSecret }}
- --metrics-cert-dir={{ include "trainingjob-operator.metricsCertDir" . }}
{{- end }}
- --health-probe-bind-address=:8081
{{- with .Values.watchNamespaces }}
- --watch-namespaces={{ join "," . }}
{{- end }}
{{- with .Values.clusterName }}
- --cluster-name={{ . }}
{{- end }}
{{- range $fw, $img := .Values.defaultImages }}
- --default-image-{{ $fw }}={{ $img }}
{{- end }}
{{- with .Values.gpuResourceName }}
- --gpu-resource-name={{ . }}
{{- end }}
{{- with .Values.checkpoint.defaultStorage }}
- --default-checkpoint-storage={{ . }}
{{- end }}
{{- with .Values.checkpoint.defaultClaimSize }}
- --default-checkpoint-claim-size={{ . }}
{{- end }}
{{- with .Values.checkpoint.defaultStorageClass }}
- --default-checkpoint-storage-class={{ . }}
{{- end }}
{{- with .Values.mlflow.trackingUri }}
- --mlflow-tracking-uri={{ . }}
{{- end }}
{{- with .Values.mlflow.credentialsSecret }}
- --mlflow-credentials-secret={{ $.Release.Namespace }}/{{ . }}
{{- end }}
{{- with .Values.inputs.cache }}
- --inputs-cache={{ . }}
{{- end }}
{{- with .Values.inputs.nodeCacheDir }}
- --inputs-node-cache-dir={{ . }}
{{- end }}
{{- if and .Values.inputs.nodeCacheDir .Values.inputs.nodeCacheMaxSize }}
- --inputs-node-cache-max-size={{ .Values.inputs.nodeCacheMaxSize }}
{{- end }}
{{- if .Values.workerDefaults }}
- --worker-defaults={{ include "trainingjob-operator.workerDefaultsDir" . }}/worker-defaults.yaml
{{- end }}
{{- range .Values.extraArgs }}
- {{ . }}
{{- end }}
{{- end -}}

{{/* Where the metrics certificate Secret (metrics.certSecret) is mounted. */}}
{{- define "trainingjob-operator.metricsCertDir" -}}
/etc/trainingjob-operator/metrics-certs
{{- end -}}

{{/* Where the worker defaults' ConfigMap (workerDefaults) is mounted. */}}
{{- define "trainingjob-operator.workerDefaultsDir" -}}
/etc/trainingjob-operator/worker-defaults
{{- end -}}

{{/*
The cluster-scoped resources among the generated rules (files/role.yaml), as GROUP/RESOURCE ("" is the core
group). With watchNamespaces set, the ClusterRole keeps only the rules on these; every other rule is on a
namespaced resource and goes into a Role in each watched namespace instead. The manager's cache holds only
namespaced objects, limited to the watched namespaces (controllers.CacheOptions), and reads these few
directly (get, never list or watch). A resource new in the markers is treated as namespaced until it is
listed here; tests/integration/helm_rbac_test.go fails until it is classified.
*/}}
{{- define "trainingjob-operator.clusterScopedResources" -}}
- /nodes
- scheduling.k8s.io/priorityclasses
- kueue.x-k8s.io/resourceflavors
- kueue.x-k8s.io/workloadpriorityclasses
- kueue.x-k8s.io/clusterqueues
- kueue.x-k8s.io/admissionchecks
- authentication.k8s.io/tokenreviews
- authorization.k8s.io/subjectaccessreviews
{{- end -}}

{{/*
The generated rules of one scope, as YAML: (dict "rules" RULES "cluster" true) those on cluster-scoped
resources (clusterScopedResources) and on non-resource URLs, (dict "rules" RULES "cluster" false) those on
namespaced resources. A rule on both keeps its groups and verbs in each, with its resources split.
*/}}
{{- define "trainingjob-operator.rulesOfScope" -}}
{{- $clusterScoped := include "trainingjob-operator.clusterScopedResources" . | fromYamlArray -}}
{{- $out := list -}}
{{- range $rule := .rules -}}
{{- if not $rule.resources -}}
{{- if $.cluster }}{{ $out = append $out $rule }}{{ end -}}
{{- else -}}
{{- $picked := list -}}
{{- range $res := $rule.resources -}}
{{- $n := 0 -}}
{{- range $g := $rule.apiGroups }}{{ if has (printf "%s/%s" $g $res) $clusterScoped }}{{ $n = add1 $n }}{{ end }}{{ end -}}
{{- if and (gt $n 0) (lt $n (len $rule.apiGroups)) -}}
{{- fail (printf "rule %v: %s is cluster-scoped in some of its groups only; list it for all of them in clusterScopedResources or none" $rule $res) -}}
{{- end -}}
{{- if eq (gt $n 0) $.cluster }}{{ $picked = append $picked $res }}{{ end -}}
{{- end -}}
{{- if $picked }}{{ $out = append $out (set (deepCopy $rule) "resources" $picked) }}{{ end -}}
{{- end -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/*
A Role or ClusterRole of the operator and its binding to the operator's ServiceAccount:
(dict "root" $ "kind" "Role" "name" NAME "namespace" NAMESPACE "rules" RULES); a ClusterRole has no namespace.
*/}}
{{- define "trainingjob-operator.boundRole" -}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: {{ .kind }}
metadata:
  name: {{ .name }}
  {{- with .namespace }}
  namespace: {{ . }}
  {{- end }}
  labels:
    {{- include "trainingjob-operator.helmLabels" .root | nindent 4 }}
rules:
  {{- toYaml .rules | nindent 2 }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: {{ .kind }}Binding
metadata:
  name: {{ .name }}
  {{- with .namespace }}
  namespace: {{ . }}
  {{- end }}
  labels:
    {{- include "trainingjob-operator.helmLabels" .root | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: {{ .kind }}
  name: {{ .name }}
subjects:
  - kind: ServiceAccount
    name: {{ include "trainingjob-operator.fullname" .root }}
    namespace: {{ .root.Release.Namespace }}
{{- end -}}
