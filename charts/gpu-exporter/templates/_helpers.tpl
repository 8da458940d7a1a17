{{/*
Names and labels. The label scheme is dcgm-exporter's chart's (name, instance and component
as the selector), with dcgm-exporter as the default name: a release moved from that chart
keeps its DaemonSet selector (immutable) and its Service labels, so `helm upgrade` goes
through and monitors, policies and queries selecting those labels keep matching.
*/}}

{{- define "gpu-exporter.appName" -}}
{{- default "dcgm-exporter" .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The release name when it contains the chart's name, as dcgm-exporter's chart derives it; a
release whose name contains dcgm-exporter (how that chart's releases are usually named) keeps
its name too, so that `helm upgrade` of it with this chart replaces its objects in place.
*/}}
{{- define "gpu-exporter.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if or (contains $name .Release.Name) (and (not .Values.nameOverride) (contains "dcgm-exporter" .Release.Name)) -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "gpu-exporter.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride -}}
{{- end -}}

{{- define "gpu-exporter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpu-exporter.appName" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: {{ include "gpu-exporter.appName" . }}
{{- end -}}

{{- define "gpu-exporter.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "gpu-exporter.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpu-exporter
{{- end -}}

{{- define "gpu-exporter.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "gpu-exporter.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* By digest when image.digest is set (the tag is then ignored), else by tag. */}}
{{- define "gpu-exporter.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The ConfigMap holding the exporter's YAML config file (config.*). */}}
{{- define "gpu-exporter.configConfigMap" -}}
{{- if .Values.config.create -}}
{{- default (printf "%s-config" (include "gpu-exporter.fullname" .)) .Values.config.name -}}
{{- else -}}
{{- required "config.name must be set when config.create is false" .Values.config.name -}}
{{- end -}}
{{- end -}}

{{/*
The ConfigMap holding the metrics CSV keeps the fixed name dcgm-exporter's chart gives it:
values written for that chart mount it by this name through extraConfigMapVolumes.
*/}}
{{- define "gpu-exporter.metricsConfigMap" -}}exporter-metrics-config-map{{- end -}}

{{/* "true" when the metrics ConfigMap is made: customMetrics is set or a volume uses it. */}}
{{- define "gpu-exporter.metricsConfigMapWanted" -}}
{{- $wanted := ne (.Values.customMetrics | default "") "" -}}
{{- range .Values.extraConfigMapVolumes -}}
{{- if and .configMap (eq (.configMap.name | default "") (include "gpu-exporter.metricsConfigMap" $)) -}}
{{- $wanted = true -}}
{{- end -}}
{{- end -}}
{{- if $wanted }}true{{ end -}}
{{- end -}}

{{/*
The ConfigMap `-m`/`--configmap-data NAMESPACE:NAME` (or DCGM_EXPORTER_CONFIGMAP_DATA) asks the
exporter to read through the API server; empty when none is asked for ("none" turns it off).
*/}}
{{- define "gpu-exporter.configmapData" -}}
{{- $found := "" -}}
{{- $args := .Values.arguments | default list -}}
{{- range $i, $arg := $args -}}
{{- $arg = toString $arg -}}
{{- if and (has $arg (list "-m" "--configmap-data" "-configmap-data")) (lt (add1 $i) (len $args)) -}}
{{- $found = toString (index $args (add1 $i)) -}}
{{- else if or (hasPrefix "--configmap-data=" $arg) (hasPrefix "-m=" $arg) -}}
{{- $found = regexReplaceAll "^[^=]*=" $arg "" -}}
{{- end -}}
{{- end -}}
{{- if not $found -}}
{{- range .Values.extraEnv -}}
{{- if and (eq (.name | default "") "DCGM_EXPORTER_CONFIGMAP_DATA") .value -}}
{{- $found = toString .value -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if ne $found "none" }}{{ $found }}{{ end -}}
{{- end -}}

{{/* The settings that make the exporter read pods (and DRA ResourceSlices) from the API. */}}
{{- define "gpu-exporter.readsPods" -}}
{{- $k := .Values.kubernetes -}}
{{- if or $k.enablePodLabels $k.enablePodUID $k.podLabelPresets $k.podLabelRegex .Values.kubernetesDRA.enabled -}}
true
{{- end -}}
{{- end -}}

{{/* "true" when the node fault writer is on: a condition, Events or a taint (docs/faults.md). */}}
{{- define "gpu-exporter.writesFaults" -}}
{{- $f := .Values.faults | default dict -}}
{{- if or $f.nodeCondition $f.events $f.taint -}}
true
{{- end -}}
{{- end -}}

{{/*
Whether the pod (and the ServiceAccount) mount a service account token: an explicit
serviceAccount.automountServiceAccountToken wins; unset, only what calls the API server gets
one. Unlike dcgm-exporter's chart, that holds with kubernetes.rbac.create false too: the
RBAC is then the user's own, and the exporter still needs the token to use it.
*/}}
{{- define "gpu-exporter.needsToken" -}}
{{- $explicit := .Values.serviceAccount.automountServiceAccountToken -}}
{{- if kindIs "bool" $explicit -}}
{{- if $explicit }}true{{ end -}}
{{- else if or (include "gpu-exporter.readsPods" .) (include "gpu-exporter.configmapData" .) (include "gpu-exporter.writesFaults" .) -}}
true
{{- end -}}
{{- end -}}

{{- define "gpu-exporter.webConfigName" -}}
{{- if .Values.webConfig.existingSecret -}}
{{- .Values.webConfig.existingSecret -}}
{{- else -}}
{{- printf "%s-web-config.yml" (include "gpu-exporter.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* "true" when the exporter gets a web config: TLS, basic auth or a Secret of one. */}}
{{- define "gpu-exporter.webConfigWanted" -}}
{{- if or .Values.tlsServerConfig.enabled .Values.basicAuth.users .Values.webConfig.existingSecret -}}
true
{{- end -}}
{{- end -}}

{{- define "gpu-exporter.tlsSecretName" -}}
{{- if .Values.tlsServerConfig.existingSecret -}}
{{- tpl .Values.tlsServerConfig.existingSecret . -}}
{{- else -}}
{{- printf "%s-tls" (include "gpu-exporter.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* Container paths of the mounted web config and TLS files. */}}
{{- define "gpu-exporter.webConfigDir" -}}/etc/dcgm-exporter/web{{- end -}}
{{- define "gpu-exporter.tlsDir" -}}/etc/dcgm-exporter/tls{{- end -}}
{{- define "gpu-exporter.collectorsDir" -}}/etc/gpu-exporter/collectors{{- end -}}

{{/*
A scrape endpoint of a ServiceMonitor or PodMonitor, from serviceMonitor.* or podMonitor.*
(passed as .monitor, the root as .root).
*/}}
{{- define "gpu-exporter.scrapeEndpoint" -}}
{{- $m := .monitor -}}
{{- $root := .root -}}
{{- $tls := $root.Values.tlsServerConfig -}}
- port: metrics
  path: /metrics
  scheme: {{ $m.scheme | default (ternary "https" "http" $tls.enabled) }}
  interval: {{ $m.interval | quote }}
  scrapeTimeout: {{ $m.scrapeTimeout | quote }}
  honorLabels: {{ $m.honorLabels }}
  {{- if $m.tlsConfig }}
  tlsConfig:
    {{- toYaml $m.tlsConfig | nindent 4 }}
  {{- else if and $tls.enabled $tls.autoGenerated (not $tls.existingSecret) }}
  tlsConfig:
    serverName: {{ include "gpu-exporter.fullname" $root }}
    ca:
      secret:
        name: {{ include "gpu-exporter.tlsSecretName" $root }}
        key: {{ $tls.caFilename }}
  {{- end }}
  {{- with $m.basicAuth }}
  basicAuth:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $m.relabelings }}
  relabelings:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $m.metricRelabelings }}
  metricRelabelings:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}
