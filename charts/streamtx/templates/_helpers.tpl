{{/* The streamtx services (image `streamtx serve <name>`), in start order. */}}
{{- define "streamtx.services" -}}broker pendingack coordinator replication{{- end -}}

{{- define "streamtx.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "streamtx.fullname" -}}
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

{{/* A component's resource name: <fullname>-<component>. Call with (dict "root" $ "name" "broker"). */}}
{{- define "streamtx.component" -}}
{{- printf "%s-%s" (include "streamtx.fullname" .root) .name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "streamtx.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "streamtx.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: streamtx
{{- end -}}

{{/* Selector labels of one component. Call with (dict "root" $ "name" "broker"). */}}
{{- define "streamtx.selectorLabels" -}}
app.kubernetes.io/name: {{ include "streamtx.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .name }}
{{- end -}}

{{- define "streamtx.componentLabels" -}}
{{ include "streamtx.labels" .root }}
app.kubernetes.io/component: {{ .name }}
{{- end -}}

{{/* image: the component's own keys over the chart's. Call with (dict "root" $ "c" $component). */}}
{{- define "streamtx.image" -}}
{{- $img := mergeOverwrite (deepCopy .root.Values.image) (.c.image | default dict) -}}
{{- printf "%s:%s" $img.repository (default .root.Chart.AppVersion (toString $img.tag)) -}}
{{- end -}}

{{- define "streamtx.pullPolicy" -}}
{{- $img := mergeOverwrite (deepCopy .root.Values.image) (.c.image | default dict) -}}
{{- $img.pullPolicy | default "IfNotPresent" -}}
{{- end -}}

{{- define "streamtx.secretName" -}}
{{- .Values.auth.existingSecret | default (printf "%s-auth" (include "streamtx.fullname" .)) -}}
{{- end -}}

{{/* The Kafka bootstrap the services' ledger URL names. */}}
{{- define "streamtx.kafkaBootstrap" -}}
{{- if .Values.ledger.kafka.bootstrap -}}
{{- .Values.ledger.kafka.bootstrap -}}
{{- else -}}
{{- printf "%s:%v" (include "streamtx.component" (dict "root" . "name" "kafka")) .Values.components.kafka.port -}}
{{- end -}}
{{- end -}}

{{/* A probe from a component's probe block: an HTTP path or a TCP port. */}}
{{- define "streamtx.probe" -}}
{{- if .p.path -}}
httpGet:
  path: {{ .p.path }}
  port: {{ .port }}
{{- else -}}
tcpSocket:
  port: {{ .p.tcpPort | default .port }}
{{- end }}
periodSeconds: {{ .p.periodSeconds | default 10 }}
timeoutSeconds: {{ .p.timeoutSeconds | default 3 }}
failureThreshold: {{ .p.failureThreshold | default 3 }}
{{- end -}}

{{/* Pod and container security: non-root, no privilege escalation, no capabilities. */}}
{{- define "streamtx.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .uid | default 10001 }}
runAsGroup: {{ .uid | default 10001 }}
fsGroup: {{ .uid | default 10001 }}
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "streamtx.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: {{ .readOnlyRootFilesystem }}
capabilities:
  drop: [ALL]
{{- end -}}

{{/* A leased service's membership (the coordinator's ids, the pending-ack store's
subscription slots, the broker's topics; .what names them): with Redis each replica is named after its
pod and advertises its pod's DNS name for redirects. Refuses replicas that could
not share the logs safely. */}}
{{- define "streamtx.replicaEnv" -}}
{{- $v := .root.Values }}
{{- $redis := "" }}
{{- if $v.components.redis.enabled }}
{{- $redis = printf "redis://%s:%v/0" (include "streamtx.component" (dict "root" .root "name" "redis")) $v.components.redis.port }}
{{- end }}
{{- if gt (int .c.replicas) 1 }}
{{- if not (or $redis (hasKey .c.env "STREAMTX_REDIS_URL")) }}
{{- fail (printf "components.%s.replicas > 1 needs components.redis.enabled (or env.STREAMTX_REDIS_URL): the replicas lease %s in Redis" .name .what) }}
{{- end }}
{{- if ne $v.ledger.backend "kafka" }}
{{- fail (printf "components.%s.replicas > 1 needs ledger.backend=kafka: a log's new owner must read what its old owner wrote" .name) }}
{{- end }}
{{- end -}}
{{- if gt (int (.c.env.STREAMTX_WORKERS | default 1)) 1 }}
{{- if not (or $redis (hasKey .c.env "STREAMTX_REDIS_URL")) }}
{{- fail (printf "components.%s.env.STREAMTX_WORKERS > 1 needs components.redis.enabled (or env.STREAMTX_REDIS_URL): the workers lease %s and forward requests through Redis" .name .what) }}
{{- end }}
{{- end }}
- name: STREAMTX_MEMBER
  valueFrom: {fieldRef: {fieldPath: metadata.name}}
- name: STREAMTX_ADVERTISED_URL
  value: {{ printf "http://$(STREAMTX_MEMBER).%s-headless.%s.svc:%v" (include "streamtx.component" (dict "root" .root "name" .name)) .root.Release.Namespace .c.port | quote }}
{{- if and $redis (not (hasKey .c.env "STREAMTX_REDIS_URL")) }}
- name: STREAMTX_REDIS_URL
  value: {{ $redis | quote }}
{{- end }}
{{- end -}}
