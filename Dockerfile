# syntax=docker/dockerfile:1
#
# The image the deploy files run (infra/deploy: `image: tollgate`): two static binaries
# on distroless's static image, which holds nothing but CA certificates (Stripe, SMTP,
# https upstreams, NATS and Redis over TLS), tzdata and a passwd entry for the nonroot
# user. tollgate, the entrypoint, runs the api and billing (args api, billing) and every
# other command; the edge Deployment runs tollgate-edge, the same edge process linked
# without the api's, the console's and billing's code, so each edge maps and initialises
# less (less RSS per edge) and a compromised edge holds none of that code. No shell, no
# package manager: nothing for an attacker on a compromised edge to use, and no libc for
# the binaries to need.
#
#   docker build -t registry.example.com/tollgate:1.0.0 .
#
# infra/deploy's TestImage runs the build commands below (the same flags and env) and
# checks the binaries are static and run, and that USER matches the manifests'
# securityContext.

# The builder runs on the build machine's platform and cross-compiles (no emulation):
# TARGETOS and TARGETARCH come from `docker buildx build --platform …`.
FROM --platform=$BUILDPLATFORM golang:1.26-trixie AS build
ARG TARGETOS
ARG TARGETARCH
WORKDIR /src
# Modules first: this layer is rebuilt only when go.mod or go.sum change.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# No cgo: the binaries need no libc and run on the static image. Go's own DNS resolver
# and TLS stack serve them.
ENV CGO_ENABLED=0
# -trimpath keeps the build machine's paths out of the binary (and out of stack traces);
# -s -w drop the symbol table and DWARF, which profiles and panics do not need.
RUN --mount=type=cache,target=/root/.cache/go-build \
    GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -ldflags="-s -w" -o /out/tollgate .
# The edge's binary, with the same flags, in a RUN of its own (TestImage runs plain
# commands only); the cache the first build filled leaves it little more than the link.
RUN --mount=type=cache,target=/root/.cache/go-build \
    GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -ldflags="-s -w" -o /out/tollgate-edge ./cmd/tollgate-edge

FROM gcr.io/distroless/static-debian13:nonroot
COPY --from=build /out/tollgate /usr/local/bin/tollgate
COPY --from=build /out/tollgate-edge /usr/local/bin/tollgate-edge
# Numeric, so Kubernetes can check runAsNonRoot against the image; the manifests run the
# pods as the same user and group.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/tollgate"]
