# fleet health wait, docker's section (launcher/runtimes/docker.py; wait.sh runs it): takes its
# one argument, the docker inspect format (DOCKER_FORMAT), then defines live_docker NAME...,
# which reads the containers' liveness into $out and counts them into up/seen/bad.
# shellcheck disable=SC2034 # bad (like up, seen and out) is wait.sh's: it reads them
docker_fmt=$1; shift
live_docker() {
  out=$(docker inspect --type container -f "$docker_fmt" "$@" 2>&1)
  for line in $out; do
    case $line in
    /*"|running|"*"|0") up=$((up+1)) seen=$((seen+1)) ;;
    /*"|created|"*"|0") seen=$((seen+1)) ;;
    /*) bad=1 seen=$((seen+1)) ;;
    esac
  done
}
