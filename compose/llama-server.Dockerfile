# The rig's llama-server image: busybox-static (for the healthcheck's wget) plus
# the llama-server binary, the shared libraries ldd lists, and the tiny model.
FROM infer-top/busybox:1
COPY rootfs/ /
EXPOSE 8080
HEALTHCHECK --interval=1s --timeout=2s --start-period=30s --retries=3 \
  CMD ["/bin/busybox", "wget", "-q", "-O", "/dev/null", "http://127.0.0.1:8080/health"]
ENTRYPOINT ["/usr/local/bin/llama-server", "--host", "0.0.0.0", "--port", "8080"]
CMD ["-m", "/models/tiny.gguf", "-np", "4", "-c", "8192", "-t", "2", "--metrics", "--no-webui"]
