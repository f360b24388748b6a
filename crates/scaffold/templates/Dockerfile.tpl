# Build a static binary, then run it as a non-root user in an image with
# nothing else in it. With kubeforge as a path dependency the build context
# must hold it too: scaffold with --kubeforge-git for image builds.
FROM docker.io/library/rust:1.89-bookworm AS build
RUN rustup target add x86_64-unknown-linux-musl && apt-get update && apt-get install -y --no-install-recommends musl-tools && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked --target x86_64-unknown-linux-musl && cp target/x86_64-unknown-linux-musl/release/{{name}} /manager

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /manager /manager
USER 65532:65532
ENTRYPOINT ["/manager"]
