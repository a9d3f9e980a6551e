# syntax=docker/dockerfile:1
# Multi-stage build. Dependencies are compiled in their own layer (cargo-chef), rebuilt only
# when Cargo.toml or Cargo.lock change; the crate builds --locked; the runtime image has the
# binary, CA certificates and OpenSSL, no shell tools (no curl: `autofactura healthcheck`), and
# runs as an unprivileged user.
ARG RUST_IMAGE=rust:1-bookworm

FROM ${RUST_IMAGE} AS chef
RUN cargo install cargo-chef --locked --version ^0.1
WORKDIR /src

# The recipe: only the manifest and lock matter to it, so it changes only when they do.
FROM chef AS planner
COPY . .
RUN cargo chef prepare --recipe-path recipe.json

FROM chef AS build
RUN apt-get update && apt-get install -y --no-install-recommends pkg-config libssl-dev \
    && rm -rf /var/lib/apt/lists/*
COPY --from=planner /src/recipe.json recipe.json
# The dependencies alone: this layer is cached until the recipe changes.
RUN cargo chef cook --release --locked --recipe-path recipe.json
COPY . .
RUN cargo build --release --locked --bin autofactura && strip target/release/autofactura

FROM debian:bookworm-slim AS runtime
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates libssl3 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /app --create-home autofactura \
    && mkdir -p /data && chown autofactura /data
COPY --from=build /src/target/release/autofactura /usr/local/bin/autofactura
COPY autofactura.example.toml /app/autofactura.example.toml
USER 10001:10001
WORKDIR /app
# SQLite lives on this volume (ignored when [database] url points at PostgreSQL).
VOLUME ["/data"]
ENV AUTOFACTURA__SERVER__LISTEN=0.0.0.0:8080 \
    AUTOFACTURA__DATABASE__URL=sqlite:///data/autofactura.db \
    AUTOFACTURA__LOG__FORMAT=json
EXPOSE 8080
# Ready, not just alive: the database answers and the worker pool beats (/readyz).
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["autofactura", "healthcheck", "--timeout", "4"]
# serve stops on SIGTERM: in-flight PAC calls get [worker] shutdown_grace_seconds (20 s by
# default); give `docker stop` more than that (docker stop -t 30, stop_grace_period in compose).
STOPSIGNAL SIGTERM
ENTRYPOINT ["autofactura"]
CMD ["serve"]
