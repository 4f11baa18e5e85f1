#!/usr/bin/env bash
# Regenerates kinds/testdata/protobuf/: for each kubectl version (1.32, 1.33) and each command below,
# the protobuf body kubectl POSTs (<name>.v1_3X.pb) and the JSON kubectl prints with
# `--dry-run=client -o json` for the same command (<name>.v1_3X.json).
# Needs python3 and the machine's /usr/bin/kubectl dispatcher; uses loopback ports 18481-18484.
set -euo pipefail
set -f # commands are split on spaces, never globbed
repo=$(cd "$(dirname "$0")/.." && pwd)
out="$repo/kinds/testdata/protobuf"
work=$(mktemp -d)
pids="$work/srv.32.pid $work/srv.33.pid $work/srv.delete.32.pid $work/srv.delete.33.pid"
trap 'for p in $pids; do kill "$(cat "$p" 2>/dev/null)" 2>/dev/null || true; done; rm -rf "$work"' EXIT
mkdir -p "$out"
printf 'binary\0\x01\x02\xff\xfe data' > "$work/blob.bin"
printf 'line one\nline two\n' > "$work/notes.txt"

commands=(
  "namespace|create namespace x"
  "configmap|create configmap c --from-literal=a=1 --from-literal=empty= --from-file=notes.txt=$work/notes.txt --from-file=blob.bin=$work/blob.bin"
  "secret|create secret generic s --from-literal=k=v --from-file=blob.bin=$work/blob.bin"
  "secret-docker|create secret docker-registry reg --docker-server=r.example --docker-username=u --docker-password=p"
  "deployment|create deployment d --image=nginx --replicas=2 --port=80"
  "deployment-zero|create deployment z --image=busybox --replicas=0 -- sleep 3600"
  "service-clusterip|create service clusterip s --tcp=80:8080"
  "service-nodeport|create service nodeport np --tcp=443:https --node-port=30443"
  "service-headless|create service clusterip h --clusterip=None"
  "serviceaccount|create serviceaccount sa"
  "job|create job j --image=busybox -- echo hi"
  "cronjob|create cronjob cj --image=busybox --schedule=@hourly -- date"
  "ingress|create ingress ing --class=nginx --rule=example.com/path*=svc:8080,tls=tls-secret"
  "pdb|create poddisruptionbudget pdb --selector=app=web --min-available=50%"
  "quota|create quota q --hard=cpu=1,memory=1G,pods=2 --scopes=BestEffort"
  "role|create role r --verb=get,list --resource=pods,deployments.apps --resource-name=x"
  "rolebinding|create rolebinding rb --role=r --user=alice --serviceaccount=default:sa"
  "priorityclass|create priorityclass pc --value=1000 --global-default=false --description=hi --preemption-policy=Never"
)
# Commands without --dry-run: only the protobuf body is recorded (tests spell out the JSON).
raw_commands=(
  "token|create token sa --audience=api --duration=1h --bound-object-kind=Pod --bound-object-name=p --bound-object-uid=u-1"
)
# Against a fake without pods/eviction, so that drain DELETEs its pods with a DeleteOptions body.
delete_commands=(
  "deleteoptions-empty|drain n1 --force"
  "deleteoptions-grace0|drain n1 --force --grace-period=0"
  "deleteoptions-dryrun|drain n1 --force --grace-period=5 --dry-run=server"
)

port=18480
for minor in 32 33; do
  port=$((port + 1))
  cfg="$work/kubeconfig.$minor"
  cat > "$cfg" <<EOC
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://127.0.0.1:$port"}}]
users: [{name: u, user: {}}]
contexts: [{name: c, context: {cluster: c, user: u, namespace: default}}]
current-context: c
EOC
  rec="$work/rec.$minor"
  python3 "$repo/tools/capture-kubectl-bodies.py" "$port" "$rec" "$minor" & echo $! > "$work/srv.$minor.pid"
  sleep 1
  for entry in "${commands[@]}"; do
    name=${entry%%|*}; cmd=${entry#*|}
    find "$rec" -name 'req*' -delete
    # shellcheck disable=SC2086
    KUBECONFIG=$cfg kubectl --cache-dir "$work/cache.$minor" $cmd > /dev/null
    cp "$rec/$(ls "$rec" | grep '\.bin$' | head -n1)" "$out/$name.v1_$minor.pb"
    # shellcheck disable=SC2086
    # The dry-run flags go before a `--` that starts a container command.
    cmd=$cmd
    if [[ $cmd == *" -- "* ]]; then dry="${cmd%% -- *} --dry-run=client -o json -- ${cmd#* -- }"
    else dry="$cmd --dry-run=client -o json"; fi
    # shellcheck disable=SC2086
    KUBECONFIG=$cfg kubectl --cache-dir "$work/cache.$minor" $dry > "$out/$name.v1_$minor.json"
  done
  for entry in "${raw_commands[@]}"; do
    name=${entry%%|*}; cmd=${entry#*|}
    find "$rec" -name 'req*' -delete
    # shellcheck disable=SC2086
    KUBECONFIG=$cfg kubectl --cache-dir "$work/cache.$minor" $cmd > /dev/null
    cp "$rec/$(ls "$rec" | grep '\.bin$' | head -n1)" "$out/$name.v1_$minor.pb"
  done
  kill "$(cat "$work/srv.$minor.pid")"
  port=$((port + 2))
  rec="$work/rec-delete.$minor"
  python3 "$repo/tools/capture-kubectl-bodies.py" "$port" "$rec" "$minor" no-eviction & echo $! > "$work/srv.delete.$minor.pid"
  sleep 1
  sed -i "s|127.0.0.1:$((port - 2))|127.0.0.1:$port|" "$cfg"
  for entry in "${delete_commands[@]}"; do
    name=${entry%%|*}; cmd=${entry#*|}
    find "$rec" -name 'req*' -delete
    # shellcheck disable=SC2086
    KUBECONFIG=$cfg kubectl --cache-dir "$work/cache.$minor" $cmd > /dev/null
    cp "$rec/$(ls "$rec" | grep '\.bin$' | head -n1)" "$out/$name.v1_$minor.pb"
  done
  port=$((port - 2))
done
echo "fixtures written to $out"
