{{/* Names and labels. */}}
{{- define "tessera.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "tessera.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "tessera.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "tessera.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels of one component: (dict "root" $ "component" "node-agent"). */}}
{{- define "tessera.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tessera.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "tessera.componentLabels" -}}
{{ include "tessera.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "tessera.agent.fullname" -}}
{{- printf "%s-node-agent" (include "tessera.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "tessera.webhook.fullname" -}}
{{- printf "%s-webhook" (include "tessera.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* A component's service account: (dict "account" .Values.agent.serviceAccount "fullname" NAME).
Made by the chart (create): the given name or NAME; brought by the user: the given name, which
templates/validate.yaml requires. */}}
{{- define "tessera.serviceAccountName" -}}
{{- if .account.create -}}
{{- default .fullname .account.name -}}
{{- else -}}
{{- .account.name -}}
{{- end -}}
{{- end -}}

{{- define "tessera.agent.serviceAccountName" -}}
{{- include "tessera.serviceAccountName" (dict "account" .Values.agent.serviceAccount "fullname" (include "tessera.agent.fullname" .)) -}}
{{- end -}}

{{- define "tessera.webhook.serviceAccountName" -}}
{{- include "tessera.serviceAccountName" (dict "account" .Values.webhook.serviceAccount "fullname" (include "tessera.webhook.fullname" .)) -}}
{{- end -}}

{{- define "tessera.webhook.tlsSecretName" -}}
{{- if eq (include "tessera.webhook.tlsMode" .) "provided" -}}
{{- .Values.webhook.tls.secretName -}}
{{- else -}}
{{- printf "%s-tls" (include "tessera.webhook.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/*
An image reference: (dict "root" $ "image" .Values.agent.image). The tag is a string: an all-digit
tag comes as an int64 from --set and as a float64 from a values file (1234567 would print as
1.234567e+06), so integers are printed as integers; an empty tag is the chart's appVersion, the tag
scripts/build-images.sh gives by default.
*/}}
{{- define "tessera.imageTag" -}}
{{- $tag := .image.tag -}}
{{- /* values.schema.json admits only whole numbers. */ -}}
{{- if kindIs "float64" $tag -}}
{{- $tag = int64 $tag -}}
{{- end -}}
{{- default .root.Chart.AppVersion (toString $tag) -}}
{{- end -}}

{{- define "tessera.image" -}}
{{- printf "%s:%s" .image.repository (include "tessera.imageTag" .) -}}
{{- end -}}

{{/* The TLS mode after "auto" is resolved: certManager, selfManaged, helm or provided. Both of
auto's answers render the same objects every time (no certificate is generated at render time). */}}
{{- define "tessera.webhook.tlsMode" -}}
{{- $mode := .Values.webhook.tls.mode -}}
{{- if eq $mode "auto" -}}
{{- if .Capabilities.APIVersions.Has "cert-manager.io/v1" -}}certManager{{- else -}}selfManaged{{- end -}}
{{- else -}}
{{- $mode -}}
{{- end -}}
{{- end -}}

{{/* The Kubernetes minor version as an integer (1.36.0 -> 36). */}}
{{- define "tessera.kubeMinor" -}}
{{- .Capabilities.KubeVersion.Minor | trimSuffix "+" | atoi -}}
{{- end -}}

{{/*
The node agent's settings that are passed as flags: values key (under agent.config) -> flag.
One row per flag; add a row when the agent gets a flag. "count" flags are repeated N times (-v),
others are rendered --flag=<value>. A null value leaves the agent's default.
The agent's flags are listed by `tessera-node-agent --help`; --process-watch=off is in the args
below (agent.processWatch.enabled: false).
*/}}
{{- define "tessera.agent.flagTable" -}}
reconcileInterval: {flag: --reconcile-interval}
devicePollInterval: {flag: --device-poll-interval}
checkInterval: {flag: --check-interval}
enforcementDefault: {flag: --enforcement-default}
tenantMinEnforcement: {flag: --tenant-min-enforcement}
tenantMaxPriority: {flag: --tenant-max-priority}
tenantMaxComputeLimit: {flag: --tenant-max-compute-limit}
tenantMaxMemoryLimit: {flag: --tenant-max-memory-limit}
apiSocket: {flag: --api-socket}
logFormat: {flag: --log-format}
verbosity: {flag: -v, count: true}
mpsControl: {flag: --mps-control}
nvidiaSmi: {flag: --nvidia-smi}
gpus: {flag: --gpus}
{{- end -}}

{{/* The agent's arguments: the chart's wiring, then agent.config through the table, then extraArgs. */}}
{{- define "tessera.agent.args" -}}
{{- $a := .Values.agent -}}
{{- $h := $a.hostPaths -}}
{{- $args := list
  (printf "--state-dir=%s" $h.stateDir)
  (printf "--kubelet-registry-dir=%s/plugins_registry" $h.kubeletDir)
  (printf "--kubelet-plugins-dir=%s/plugins" $h.kubeletDir)
  (printf "--cdi-dir=%s" $h.cdiDir)
  (printf "--shim-path=%s/libvgpu.so" $h.shimDir)
  (printf "--shim-loading=%s" $a.shimLoading)
  (printf "--driver-mode=%s" $a.driver.mode)
  (printf "--toolkit-spec-dirs=%s" (join "," $a.driver.toolkitSpecDirs))
  (printf "--driver-root=%s" $a.driver.root)
  (printf "--metrics-address=:%d" (int $a.metrics.port))
-}}
{{- if not $a.processWatch.enabled -}}
{{- $args = append $args "--process-watch=off" -}}
{{- else if $a.processWatch.required -}}
{{- $args = append $args "--process-watch=on" -}}
{{- else -}}
{{- $args = append $args "--process-watch=auto" -}}
{{- end -}}
{{- if $a.mpsDaemons.cgroup -}}
{{- $args = append $args (printf "--mps-daemon-cgroup=/sys/fs/cgroup/%s" $a.mpsDaemons.cgroup) -}}
{{- end -}}
{{- $table := include "tessera.agent.flagTable" . | fromYaml -}}
{{- range $key := keys $a.config | sortAlpha -}}
{{- $value := index $a.config $key -}}
{{- if not (hasKey $table $key) -}}
{{- fail (printf "agent.config.%s: no such agent setting (known: %s); pass other flags in agent.extraArgs" $key (keys $table | sortAlpha | join ", ")) -}}
{{- end -}}
{{- if not (kindIs "invalid" $value) -}}
{{- $row := index $table $key -}}
{{- if $row.count -}}
{{- range until (int $value) -}}
{{- $args = append $args $row.flag -}}
{{- end -}}
{{- else -}}
{{- $args = append $args (printf "%s=%v" $row.flag $value) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $a.extraArgs -}}
{{- $args = append $args . -}}
{{- end -}}
{{- toYaml $args -}}
{{- end -}}
