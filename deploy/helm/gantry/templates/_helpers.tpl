{{- define "gantry.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}{{ .Release.Name | trunc 50 | trimSuffix "-" }}{{- else -}}{{ printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" }}{{- end -}}
{{- end -}}

{{- define "gantry.labels" -}}
app.kubernetes.io/name: gantry
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* selector labels of one component: (dict "root" $ "component" "secrets") */}}
{{- define "gantry.selector" -}}
app.kubernetes.io/name: gantry
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "gantry.keyringSecret" -}}
{{- default (printf "%s-keyring" (include "gantry.fullname" .)) .Values.keyringSecret -}}
{{- end -}}

{{/* the Secret of one internal TLS identity: (dict "root" $ "name" "gateway") */}}
{{- define "gantry.tlsSecret" -}}
{{- printf "%s-%s" (default (printf "%s-tls" (include "gantry.fullname" .root)) .root.Values.tlsSecretPrefix) .name -}}
{{- end -}}

{{- define "gantry.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "gantry.toolsImage" -}}
{{ .Values.toolsImage.repository }}:{{ .Values.toolsImage.tag }}
{{- end -}}

{{/* The pod's security context: the image's non-root user; fsGroup lets it read its Secret volumes. */}}
{{- define "gantry.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "gantry.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
capabilities:
  drop: [ALL]
{{- end -}}

{{/*
An init container copying key files out of Secret volumes into the emptyDir "keys" with mode 0600
(gantry refuses a key file its group can read): (dict "root" $ "keyring" true).
*/}}
{{- define "gantry.copyKeys" -}}
- name: copy-keys
  image: {{ include "gantry.toolsImage" .root }}
  imagePullPolicy: {{ .root.Values.toolsImage.pullPolicy }}
  command: [sh, -ec]
  args:
    - |
      umask 077
      mkdir -p /var/lib/gantry/data /run/gantry/tls
      for f in ca.crt tls.crt tls.key; do install -m 0600 "/secret/tls/$f" "/run/gantry/tls/$f"; done
      {{- if .keyring }}
      install -m 0600 /secret/keyring/keyring.json /var/lib/gantry/data/keyring.json
      {{- end }}
  securityContext:
    {{- include "gantry.containerSecurityContext" .root | nindent 4 }}
  resources:
    requests: {cpu: 10m, memory: 16Mi}
    limits: {memory: 64Mi}
  volumeMounts:
    - {name: data, mountPath: /var/lib/gantry}
    - {name: keys, mountPath: /run/gantry}
    - {name: tls-secret, mountPath: /secret/tls, readOnly: true}
    {{- if .keyring }}
    - {name: keyring-secret, mountPath: /secret/keyring, readOnly: true}
    {{- end }}
{{- end -}}

{{- define "gantry.tlsEnv" -}}
- {name: GANTRY_GRPC_TLS_CA_FILE, value: /run/gantry/tls/ca.crt}
- {name: GANTRY_GRPC_TLS_CERT_FILE, value: /run/gantry/tls/tls.crt}
- {name: GANTRY_GRPC_TLS_KEY_FILE, value: /run/gantry/tls/tls.key}
- {name: GANTRY_DATA_DIR, value: /var/lib/gantry/data}
- {name: GANTRY_LOG_FORMAT, value: json}
# gantry serve collects garbage at GOGC=200 (docs/configuration.md, The Go runtime): the container's
# memory limit as the Go runtime's soft limit keeps the larger heap from reaching it.
- name: GOMEMLIMIT
  valueFrom: {resourceFieldRef: {resource: limits.memory}}
{{- end -}}

{{/* The service account of the gantry pods (serviceAccount.*). */}}
{{- define "gantry.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{ default (include "gantry.fullname" .) .Values.serviceAccount.name }}
{{- else -}}
{{ default "default" .Values.serviceAccount.name }}
{{- end -}}
{{- end -}}

{{/* Extra pod labels and annotations (podLabels, podAnnotations), after the chart's own. */}}
{{- define "gantry.podLabels" -}}
{{- with .Values.podLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "gantry.podAnnotations" -}}
{{- with .Values.podAnnotations }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
Where one component's pods run: (dict "root" $ "component" "gateway"). Image pull secrets, priority
class, node selector, tolerations and topology spread constraints as given; the affinity as given, or
by default an anti-affinity that spreads the component's replicas over nodes (podAntiAffinity: soft
prefers other nodes, hard requires them; a single-node cluster needs soft).
*/}}
{{- define "gantry.podPlacement" -}}
{{- $v := .root.Values -}}
serviceAccountName: {{ include "gantry.serviceAccountName" .root }}
{{- with $v.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with $v.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
affinity:
{{- if $v.affinity }}
  {{- toYaml $v.affinity | nindent 2 }}
{{- else if eq $v.podAntiAffinity "hard" }}
  podAntiAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      - topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "gantry.selector" (dict "root" .root "component" .component) | nindent 12 }}
{{- else }}
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels:
              {{- include "gantry.selector" (dict "root" .root "component" .component) | nindent 14 }}
{{- end }}
{{- end -}}

{{/* The probes of a process with a stats listener (secrets, chat): /ready is its services' gRPC health. */}}
{{- define "gantry.statsProbes" -}}
startupProbe:
  httpGet: {path: /live, port: stats}
  periodSeconds: 2
  failureThreshold: 60
# Ready while every service of the process reports SERVING on gRPC health: NOT_SERVING once the
# store fails its probe (etcd without quorum, an unreadable bbolt file) or its writes stall.
readinessProbe:
  httpGet: {path: /ready, port: stats}
  periodSeconds: 5
  timeoutSeconds: 3
  failureThreshold: 2
# Live while the process serves HTTP: a store that is down is not a reason to restart the process.
livenessProbe:
  httpGet: {path: /live, port: stats}
  periodSeconds: 10
  timeoutSeconds: 3
  failureThreshold: 3
{{- end -}}
