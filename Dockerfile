# Multi-stage build: compile in the Rust image, run as a non-root user on Debian slim.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked && strip target/release/autofactura

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates libssl3 curl \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /app --create-home autofactura \
    && mkdir -p /data && chown autofactura /data
COPY --from=build /src/target/release/autofactura /usr/local/bin/autofactura
COPY autofactura.example.toml /app/autofactura.example.toml
USER autofactura
WORKDIR /app
# SQLite lives on this volume (ignored when [database] url points at PostgreSQL).
VOLUME ["/data"]
ENV AUTOFACTURA__SERVER__LISTEN=0.0.0.0:8080 \
    AUTOFACTURA__DATABASE__URL=sqlite:///data/autofactura.db
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=3s --start-period=10s CMD curl -fsS http://127.0.0.1:8080/healthz || exit 1
ENTRYPOINT ["autofactura"]
CMD ["serve"]
