#!/usr/bin/env sh
# The MLflow tracking server of a production deployment: runs, metrics and the model registry in
# PostgreSQL, artifacts (model folders, reports) proxied by the server to an object store, so
# clients need the server's URL only, never bucket credentials.
#
# It runs MLflow's basic-auth app: every request needs a user and password, and only an account
# with permission on the registered model can move its `champion` alias. Whoever reaches an
# unauthenticated server can promote any model, so there is no switch to turn auth off.
#
#   MLFLOW_BACKEND_STORE_URI        postgresql://USER:PASSWORD@HOST:5432/mlflow   (required)
#   MLFLOW_ARTIFACTS_DESTINATION    s3://bucket/mlflow, gs://..., or a mounted folder (required)
#   MLFLOW_AUTH_DATABASE_URI        where users and permissions live, e.g.
#                                   postgresql://USER:PASSWORD@HOST:5432/mlflow_auth (required; its
#                                   own database: it keeps its own migration history)
#   MLFLOW_TRACKING_USERNAME        the admin account the server creates on its first start, and the
#   MLFLOW_TRACKING_PASSWORD        one the pipeline's pods sign in with (same variables: MLflow's
#                                   client reads them); from the `retrain-secrets` secret (required)
#   MLFLOW_FLASK_SERVER_SECRET_KEY  the auth app's CSRF key, the same for every worker (required)
#   MLFLOW_AUTH_DEFAULT_PERMISSION  what other signed-in users may do with what they did not create
#                                   (default READ; NO_PERMISSIONS, READ, EDIT, MANAGE)
#   MLFLOW_AUTH_CONFIG_PATH         your own basic-auth ini instead of the one written here
#   MLFLOW_HOST / MLFLOW_PORT       where to listen (default 127.0.0.1:5000: only this machine; a
#                                   Kubernetes pod sets MLFLOW_HOST=0.0.0.0, behind its NetworkPolicy)
#   MLFLOW_WORKERS                  server worker processes (default 2)
#   MLFLOW_ALLOWED_HOSTS            Host headers to accept, e.g. "mlflow:5000,mlflow.retrain.svc.cluster.local:5000";
#                                   MLflow's default (localhost and private IPs) refuses a Kubernetes
#                                   service name
#
# The admin account is created from these variables the first time the server starts against an
# empty auth database; later starts leave it as it is (rotate the password through MLflow's
# users API, then update the secret).
# A postgresql:// URI is opened with psycopg 3 (SQLAlchemy 2.1's default driver; the image has it).
# The server creates and migrates its tables on first start (~25 s before it answers).
set -eu
: "${MLFLOW_BACKEND_STORE_URI:?set it to postgresql://USER:PASSWORD@HOST:5432/DATABASE}"
: "${MLFLOW_ARTIFACTS_DESTINATION:?set it to the artifact root (s3://bucket/prefix or a folder)}"
: "${MLFLOW_AUTH_DATABASE_URI:?set it to the users and permissions database (postgresql://.../mlflow_auth)}"
: "${MLFLOW_TRACKING_USERNAME:?set it to the admin account (from the retrain-secrets secret)}"
: "${MLFLOW_TRACKING_PASSWORD:?set it to the admin account's password (from the retrain-secrets secret)}"
: "${MLFLOW_FLASK_SERVER_SECRET_KEY:?set it to a random secret shared by every worker (from the retrain-secrets secret)}"

# The admin credentials reach MLflow as environment variables (they take precedence over the ini),
# so the admin password is never written to a file; the ini (mode 0600, from mktemp) holds the auth
# database's URI.
MLFLOW_AUTH_ADMIN_USERNAME="$MLFLOW_TRACKING_USERNAME"
MLFLOW_AUTH_ADMIN_PASSWORD="$MLFLOW_TRACKING_PASSWORD"
export MLFLOW_AUTH_ADMIN_USERNAME MLFLOW_AUTH_ADMIN_PASSWORD MLFLOW_FLASK_SERVER_SECRET_KEY
if [ -z "${MLFLOW_AUTH_CONFIG_PATH:-}" ]; then
  MLFLOW_AUTH_CONFIG_PATH="$(mktemp "${TMPDIR:-/tmp}/mlflow-basic-auth.XXXXXX")"
  cat >"$MLFLOW_AUTH_CONFIG_PATH" <<EOF
[mlflow]
default_permission = ${MLFLOW_AUTH_DEFAULT_PERMISSION:-READ}
database_uri = ${MLFLOW_AUTH_DATABASE_URI}
admin_username = ${MLFLOW_TRACKING_USERNAME}
authorization_function = mlflow.server.auth:authenticate_request_basic_auth
EOF
  export MLFLOW_AUTH_CONFIG_PATH
fi

set -- server \
  --app-name basic-auth \
  --backend-store-uri "$MLFLOW_BACKEND_STORE_URI" \
  --artifacts-destination "$MLFLOW_ARTIFACTS_DESTINATION" \
  --host "${MLFLOW_HOST:-127.0.0.1}" \
  --port "${MLFLOW_PORT:-5000}" \
  --workers "${MLFLOW_WORKERS:-2}"
if [ -n "${MLFLOW_ALLOWED_HOSTS:-}" ]; then
  set -- "$@" --allowed-hosts "$MLFLOW_ALLOWED_HOSTS"
fi
exec "${MLFLOW_BIN:-mlflow}" "$@"
