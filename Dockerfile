# Builds the manager and the supervisor (copied into worker pods) as static binaries into a distroless,
# non-root image.
FROM golang:1.26.8-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY cmd/ cmd/
COPY controllers/ controllers/
COPY builders/ builders/
COPY crd/ crd/
COPY checkpoint/ checkpoint/
COPY metrics/ metrics/
COPY internal/ internal/
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags="-s -w" -o /out/manager ./cmd/manager
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags="-s -w" -o /out/supervisor ./cmd/supervisor

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/manager /manager
COPY --from=build /out/supervisor /supervisor
USER 65532:65532
ENTRYPOINT ["/manager"]
