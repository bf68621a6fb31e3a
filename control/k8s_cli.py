"""``infer-top k8s render KIND --model M``: Kubernetes manifests for an engine, from the
same engine spec and Compose file that ``infer-top engine start`` runs (``control.k8s``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agents.catalog_adapter import UnknownEngine
from control.config import ConfigError
from control.config_edit import replace_file
from control.engine_cli import launch_field_arguments, launch_fields
from control.engine_output import EXIT_OK, EXIT_USAGE
from control.k8s import K8sOptions, Manifest, gpu_kinds, render, to_yaml

EPILOG = """\
examples:
  infer-top k8s render vllm --model Qwen/Qwen2.5-7B-Instruct | kubectl apply -f -
  infer-top k8s render sglang --model meta-llama/Llama-3.1-70B-Instruct \\
      --set tensor_parallel=4 --cache-size 400Gi --secret hf-token --service-monitor -o k8s/
  infer-top k8s render llamacpp --model /models/qwen2.5-7b-q4_k_m.gguf --max-num-seqs 8

What is rendered:
  PersistentVolumeClaim NAME-models   the model cache, mounted where the engine's image
                                      keeps it (its Compose file's volume)
  ConfigMap NAME-config               files the Compose file mounts (TensorRT-LLM's options)
  Deployment NAME                     the Compose file's image, entrypoint, arguments and
                                      environment; nvidia.com/gpu = tensor x pipeline
                                      parallel; /dev/shm in memory where Compose shares the
                                      host's IPC; startup, readiness and liveness probes on
                                      the spec's health route, the startup probe allowing
                                      the engine's whole start-up time; Prometheus scrape
                                      annotations where the engine serves Prometheus text
  Service NAME                        ClusterIP, port "http"
  ServiceMonitor NAME                 with --service-monitor (Prometheus Operator)

Options an engine cannot take are refused as `infer-top engine start` refuses them.
No secret is written into a manifest: put HF_TOKEN (and the engine's API-key variable,
e.g. VLLM_API_KEY) into a Secret and name it with --secret.
-o DIR writes one file per object (kubectl apply -f DIR); without -o, or -o -, one
YAML stream goes to stdout.  Exit status: 0 written, 2 bad arguments or a refused option.
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "k8s",
        help="Kubernetes manifests for an engine, from the specs that drive Compose",
        description="Kubernetes manifests for engines: the same engine spec and Compose "
        "file that infer-top starts on a node, rendered for a cluster.",
    )
    actions = p.add_subparsers(dest="k8s_action", metavar="ACTION", required=True)
    r = actions.add_parser(
        "render",
        help="write the manifests of one engine (Deployment, Service, PVC...)",
        description="Render an engine's Kubernetes manifests from its catalog spec and "
        "Compose file: the arguments and environment are the ones Compose would run.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    r.add_argument("kind", help=f"engine kind: {', '.join(gpu_kinds())}")
    launch_field_arguments(r, on_node=False)
    r.add_argument("--name", help="name of the objects (default: infer-KIND)")
    r.add_argument("--namespace", help="namespace written into every object (default: none)")
    r.add_argument(
        "--cache-size", default="100Gi", help="the model cache claim's size (default 100Gi)"
    )
    r.add_argument("--storage-class", help="the claim's storage class (default: the cluster's)")
    r.add_argument(
        "--shm-size", default="16Gi", help="/dev/shm size where the engine needs it (16Gi)"
    )
    r.add_argument("--secret", help="a Secret whose keys become the engine's environment")
    r.add_argument(
        "--service-monitor", action="store_true", help="also a Prometheus Operator ServiceMonitor"
    )
    r.add_argument(
        "-o", "--output", default="-", metavar="DIR|-", help="a directory, or - for stdout"
    )
    r.set_defaults(func=run_render)


def run_render(args: argparse.Namespace) -> int:
    options = K8sOptions(
        name=args.name,
        namespace=args.namespace,
        cache_size=args.cache_size,
        storage_class=args.storage_class,
        shm_size=args.shm_size,
        secret=args.secret,
        service_monitor=args.service_monitor,
    )
    try:
        manifests = render(args.kind, launch_fields(args), options)
    except (UnknownEngine, ConfigError, ValueError, TypeError) as exc:
        print(f"infer-top k8s render: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.output == "-":
        sys.stdout.write(to_yaml(manifests))
        return EXIT_OK
    out = Path(args.output)
    for manifest in manifests:
        replace_file(out / _file_name(manifest), to_yaml([manifest]), 0o644)
    print(f"wrote {len(manifests)} manifests to {out}", file=sys.stderr)
    return EXIT_OK


def _file_name(manifest: Manifest) -> str:
    metadata = manifest["metadata"]
    assert isinstance(metadata, dict)
    return f"{metadata['name']}.{str(manifest['kind']).lower()}.yaml"
