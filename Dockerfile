# The shmkeeper node image: shmkeeperd, the node-setup script the DaemonSet's
# init container runs, and what it copies to the host: the static binaries
# (shmkeeper-runtime, shmkeeper-hook, shmkeeper-doctor, and shmkeeper built as
# shmkeeper-static) and libshmkeeper-preload.so.
#   docker build -t shmkeeper/shmkeeper:0.1.0 .
# Offline (no registry reachable), deploy/image/build-offline.sh builds the
# same image from a local build.
FROM debian:bookworm AS build
WORKDIR /src
COPY deploy/install-deps.sh deploy/install-deps.sh
RUN deploy/install-deps.sh build
COPY . .
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=Release -DSHMKEEPER_BUILD_TESTS=OFF \
 && cmake --build /build -j"$(nproc)" \
 && cmake --install /build --prefix /out \
 && install -m 0755 /build/plugin/shmkeeper-static /out/bin/shmkeeper

FROM debian:bookworm-slim
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends libgrpc++1.51 libprotobuf32 libyaml-cpp0.7 libtomlplusplus3 \
      libssl3 zlib1g libbrotli1 libcpp-httplib0.11 util-linux \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/bin/ /usr/local/bin/
COPY --from=build /out/share/ /usr/local/share/
COPY --from=build /out/lib/shmkeeper/libshmkeeper-preload.so /usr/local/lib/shmkeeper/libshmkeeper-preload.so
COPY deploy/image/node-setup.sh /usr/local/bin/node-setup.sh
COPY deploy/config/config.yaml /etc/shmkeeper/config.yaml
ENTRYPOINT ["/usr/local/bin/shmkeeperd"]
