#!/bin/sh
# Entry point of both images (run under tini). The platform's subcommands go through the cuda-agent CLI, so a
# manifest says `serve compile` or `worker eval`; any other command (celery, python, sh) runs unchanged.
set -eu
case "${1:-}" in
    serve | worker | db | --help) set -- cuda-agent "$@" ;;
esac
exec "$@"
