# atoll's daemon image. The NVIDIA container toolkit mounts the driver
# (libcuda, libnvidia-ml) into the container at run time; atoll loads them
# then, so the image needs no CUDA toolkit.
#
#   docker build -t registry.example.com/atoll:latest .
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_CFLAGS=-Wno-deprecated-declarations go build -ldflags "-s -w" -o /atoll ./cmd/atoll

FROM debian:bookworm-slim
COPY --from=build /atoll /usr/local/bin/atoll
ENV NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility
USER 65532:65532
ENTRYPOINT ["atoll"]
CMD ["serve", "--listen", ":8000"]
