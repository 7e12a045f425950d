{{/*
The chart renders the kustomize base's own objects (files/, copied by `make chart`) and
changes on them only what values ask for. Helpers here load, label and emit those objects.
*/}}

{{/* The image every Topoplace container runs: repository:tag, tag defaulting to appVersion. */}}
{{- define "topoplace.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* Labels on every object's metadata: the base's part-of, and Helm's own. Not on pod
templates or selectors, so adopting or upgrading never restarts a pod for a label. */}}
{{- define "topoplace.labels" -}}
app.kubernetes.io/part-of: topoplace
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Print one object (dict "obj" OBJECT "root" $) as a YAML document, labelled. */}}
{{- define "topoplace.emit" -}}
{{- $meta := .obj.metadata -}}
{{- $labels := merge (dict) ($meta.labels | default dict) (include "topoplace.labels" .root | fromYaml) -}}
{{- $_ := set $meta "labels" $labels }}
---
{{ toYaml .obj }}
{{- end -}}

{{/* The objects of one file under files/ as YAML documents, as (dict "file" PATH "root" $
"skip" LIST-OF-NAMES); only for files whose objects need no change. */}}
{{- define "topoplace.emitFile" -}}
{{- $root := .root -}}
{{- $skip := .skip | default list -}}
{{- range $doc := regexSplit "(?m)^---[ \t]*$" ($root.Files.Get .file) -1 -}}
{{- $obj := fromYaml $doc -}}
{{- if and $obj.kind (not (has $obj.metadata.name $skip)) -}}
{{ include "topoplace.emit" (dict "obj" $obj "root" $root) }}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Set the image and pull policy of every container of a pod spec: (dict "spec" SPEC "root" $). */}}
{{- define "topoplace.setImage" -}}
{{- $image := include "topoplace.image" .root -}}
{{- $policy := .root.Values.image.pullPolicy -}}
{{- range $c := concat (.spec.initContainers | default list) .spec.containers -}}
{{- $_ := set $c "image" $image -}}
{{- $_ := set $c "imagePullPolicy" $policy -}}
{{- end -}}
{{- end -}}

{{/* The name of the policies ConfigMap the pods mount. */}}
{{- define "topoplace.policiesConfigMap" -}}
{{- .Values.policies.existingConfigMap | default "topoplace-policies" -}}
{{- end -}}

{{/* Point a pod spec's `policies` volume at the policies ConfigMap: (dict "spec" SPEC "root" $). */}}
{{- define "topoplace.setPolicies" -}}
{{- $name := include "topoplace.policiesConfigMap" .root -}}
{{- range $v := .spec.volumes -}}
{{- if eq $v.name "policies" -}}
{{- $_ := set $v.configMap "name" $name -}}
{{- end -}}
{{- end -}}
{{- end -}}
