#!/bin/sh
# Register devicepool's search attributes (api/names.py SEARCH_ATTRIBUTES) on
# the compose cluster's namespace; ones already present are left alone, so a
# restart of the stack is harmless. Runs in temporalio/admin-tools.
set -eu
address="${TEMPORAL_ADDRESS:-temporal:7233}"
namespace="${TEMPORAL_NAMESPACE:-default}"
until temporal operator cluster health --address "$address" >/dev/null 2>&1; do
  echo "waiting for Temporal at $address"; sleep 2
done
until temporal operator namespace describe --address "$address" --namespace "$namespace" >/dev/null 2>&1; do
  echo "waiting for namespace $namespace"; sleep 2
done
existing="$(temporal operator search-attribute list --address "$address" --namespace "$namespace")"
for pair in \
  DevicePoolPlatform=Keyword \
  DevicePoolRegion=Keyword \
  DevicePoolDesired=Int \
  DevicePoolReady=Int \
  DevicePoolPhase=Keyword \
  DevicePoolAccount=Keyword \
  DevicePoolRowAt=Datetime
do
  name="${pair%%=*}"; type="${pair#*=}"
  if printf '%s\n' "$existing" | grep -qw "$name"; then
    echo "search attribute $name already registered"
  else
    temporal operator search-attribute create --address "$address" --namespace "$namespace" \
      --name "$name" --type "$type" --yes
    echo "search attribute $name registered"
  fi
done
