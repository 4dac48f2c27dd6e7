# syntax=docker/dockerfile:1
# The worker's image: a build stage with the Rust toolchain, and a small
# runtime stage (Debian slim: glibc, zlib and CA certificates for AWS TLS)
# running as a non-root user.
#
#   docker build -t ingest:local .
#   docker run --rm ingest:local --help
#
# The default command runs the worker with /etc/ingest/ingest.toml
# (config/container.toml); override keys with INGEST__* variables or mount
# another file there. Port 9100 serves /metrics, /healthz and /readyz.

ARG RUST_IMAGE=rust:1-bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim

FROM ${RUST_IMAGE} AS build
WORKDIR /src
# librdkafka is built from source by rdkafka-sys (configure + make).
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY benches ./benches
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin ingest \
 && install -m 0755 target/release/ingest /usr/local/bin/ingest

FROM ${RUNTIME_IMAGE} AS runtime
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 ingest \
 && useradd --system --uid 10001 --gid ingest --no-create-home --shell /usr/sbin/nologin ingest
COPY --from=build /usr/local/bin/ingest /usr/local/bin/ingest
COPY config/container.toml /etc/ingest/ingest.toml
COPY config/scenarios /etc/ingest/scenarios
USER 10001:10001
EXPOSE 9100
ENTRYPOINT ["/usr/local/bin/ingest"]
CMD ["run", "--config", "/etc/ingest/ingest.toml"]
