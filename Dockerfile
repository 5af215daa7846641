# The gantry image: the static binary `make build` produced, CA certificates, a non-root user and a
# writable /data. FROM scratch, so no base image is ever pulled. Build it with `make image`, which
# stages bin/rootfs first.
FROM scratch
COPY bin/rootfs/ /
# /data is 0700 (the keyring and session key live there): copied as a folder, so its mode comes along,
# and a fresh named volume mounted there takes it too.
COPY --chown=65532:65532 bin/rootfs-datadir/ /
# An empty /tls owned by the image's user: a fresh named volume mounted there takes its ownership, so
# the generated internal CA of a single container can be written into it.
COPY --chown=65532:65532 bin/rootfs-data/ /tls/
# The mount points of docker-compose's tls-init (gantry tls init): /pki/ca for the CA, seen by that
# one-shot container alone, and one folder per container's own leaf, all owned by the image's user.
COPY --chown=65532:65532 bin/rootfs-pki/ /pki/
COPY bin/gantry /gantry
USER 65532:65532
ENV GANTRY_DATA_DIR=/data \
    GANTRY_LOG_FORMAT=json
VOLUME ["/data"]
EXPOSE 8080 9090 9091 9901
ENTRYPOINT ["/gantry"]
