#!/usr/bin/env sh
# The MLflow tracking server of a production deployment: runs, metrics and the model registry in
# PostgreSQL, artifacts (model folders, reports) proxied by the server to an object store, so
# clients need the server's URL only, never bucket credentials.
#
#   MLFLOW_BACKEND_STORE_URI      postgresql://USER:PASSWORD@HOST:5432/mlflow   (required)
#   MLFLOW_ARTIFACTS_DESTINATION  s3://bucket/mlflow, gs://..., or a mounted folder (required)
#   MLFLOW_HOST / MLFLOW_PORT     where to listen (default 0.0.0.0:5000)
#   MLFLOW_WORKERS                server worker processes (default 2)
#   MLFLOW_ALLOWED_HOSTS          Host headers to accept, e.g. "mlflow:5000,mlflow.retrain.svc.cluster.local:5000";
#                                 MLflow's default (localhost and private IPs) refuses a Kubernetes
#                                 service name
#
# A postgresql:// URI is opened with psycopg 3 (SQLAlchemy 2.1's default driver; the image has it).
# The server creates and migrates its tables on first start (~25 s before it answers).
set -eu
: "${MLFLOW_BACKEND_STORE_URI:?set it to postgresql://USER:PASSWORD@HOST:5432/DATABASE}"
: "${MLFLOW_ARTIFACTS_DESTINATION:?set it to the artifact root (s3://bucket/prefix or a folder)}"
set -- server \
  --backend-store-uri "$MLFLOW_BACKEND_STORE_URI" \
  --artifacts-destination "$MLFLOW_ARTIFACTS_DESTINATION" \
  --host "${MLFLOW_HOST:-0.0.0.0}" \
  --port "${MLFLOW_PORT:-5000}" \
  --workers "${MLFLOW_WORKERS:-2}"
if [ -n "${MLFLOW_ALLOWED_HOSTS:-}" ]; then
  set -- "$@" --allowed-hosts "$MLFLOW_ALLOWED_HOSTS"
fi
exec "${MLFLOW_BIN:-mlflow}" "$@"
