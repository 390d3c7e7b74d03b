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
{{- with .Values.inputs.nodeCacheTTL }}
- --inputs-node-cache-ttl={{ . }}
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
