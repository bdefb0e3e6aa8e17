# syntax=docker/dockerfile:1
# The controller image: `twc` built with the toolchain pinned in rust-toolchain.toml, run from
# a distroless runtime (glibc + CA certificates, no shell) as the non-root user 65532.
# The binary uses rustls with ring and vendored protobuf (protox): no OpenSSL, no protoc.
#
#   docker build -t temporal-worker-controller:0.1.0 --build-arg GIT_COMMIT=$(git rev-parse HEAD) .
#
# GIT_COMMIT is the commit `twc --version`, the start log line and `twc_build_info` name (the
# build context has no .git); without it they say `unknown`.
#
# The entrypoint is `twc`; the chart runs `/usr/local/bin/twc run` and configures it through
# environment variables (docs/helm.md).

# Keep equal to rust-toolchain.toml.
ARG RUST_VERSION=1.95.0

FROM docker.io/library/rust:${RUST_VERSION}-bookworm AS build
ARG RUST_VERSION
ARG GIT_COMMIT=""
# Use the image's toolchain: rust-toolchain.toml would otherwise make rustup fetch its extra
# components (rustfmt, clippy), which a release build does not need.
ENV RUSTUP_TOOLCHAIN=${RUST_VERSION} \
    TWC_GIT_COMMIT=${GIT_COMMIT} \
    CARGO_TERM_COLOR=never \
    CARGO_INCREMENTAL=0
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p temporal-worker-controller --bin twc \
 && install -D -m 0755 target/release/twc /out/twc \
 && /out/twc --version

# Debian 12, like the build stage, so the glibc the binary links against is there.
FROM gcr.io/distroless/cc-debian12:nonroot
LABEL org.opencontainers.image.title="temporal-worker-controller" \
      org.opencontainers.image.description="Kubernetes controller for Temporal worker versioning (Rust)" \
      org.opencontainers.image.licenses="MIT"
COPY --from=build /out/twc /usr/local/bin/twc
USER 65532:65532
# Two malloc arenas, not glibc's up to eight per core: the controller runs two Tokio workers,
# and fewer arenas hold less freed memory (docs/benchmarks.md, "Where the memory goes").
ENV MALLOC_ARENA_MAX=2
# Allocations of 128 KiB or more (a page of a list, a response) get pages of their own, given
# back when freed: glibc otherwise raises this threshold to the largest block freed, and a
# burst's large blocks stay in its heap (at 1,000 WorkerDeployments after their first rollout:
# 33.6 MiB instead of 37.8; docs/benchmarks.md).
ENV MALLOC_MMAP_THRESHOLD_=131072
# /metrics, and /livez + /readyz
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/twc"]
CMD ["run"]
