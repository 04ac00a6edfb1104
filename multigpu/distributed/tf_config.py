"""The cluster from the TF_CONFIG environment variable, as schedulers set it.

Kubeflow's TFJob and tf.distribute hand each task its role in TF_CONFIG:

  {"cluster": {"ps": ["h0:2222"], "chief": ["h1:2222"],
               "worker": ["h2:2222"]},
   "task": {"type": "worker", "index": 0}}

The suite's cluster mode knows ps and worker tasks, worker 0 being the
chief. A `chief` job is therefore worker 0 and the workers of TF_CONFIG
follow it: TF_CONFIG's worker i is the suite's worker i + 1. A cluster
without ps tasks (a chief and workers) is a cluster of workers only, for
--variable_update=replicated.
"""

import collections
import json

# The name TensorFlow's TFConfigClusterResolver reads.
TF_CONFIG = "TF_CONFIG"
KNOWN_JOBS = ("ps", "worker", "chief")


ClusterFlags = collections.namedtuple(
    "ClusterFlags", "ps_hosts worker_hosts job_name task_index"
)
ClusterFlags.__doc__ = """The cluster flags' values: str, str, str, int."""


def parse(text):
    """The `ClusterFlags` of TF_CONFIG's text ('' when not set), as the
    cluster flags would give them; None when it names no cluster."""
    if not text.strip():
        return None
    config = _json_object(text)
    cluster = config.get("cluster") or {}
    if not cluster:
        return None
    _refuse_other_than_object(cluster, "cluster", '{"worker": ["HOST:PORT"]}')
    workers = _workers(cluster)
    task = config.get("task") or {}
    _refuse_other_than_object(task, "task", '{"type": "worker", "index": 0}')
    job_type, index = _task(task, cluster)
    if job_type == "ps":
        job_name = "ps"
    else:
        job_name = "worker"
        # The chief is worker 0; TF_CONFIG's workers follow it.
        if job_type == "worker" and cluster.get("chief"):
            index += len(cluster["chief"])
    return ClusterFlags(
        ",".join(cluster.get("ps", [])), ",".join(workers), job_name, index
    )


def _json_object(text):
    try:
        config = json.loads(text)
    except ValueError as e:
        raise ValueError("TF_CONFIG is not valid JSON (%s)" % e) from None
    if not isinstance(config, dict):
        raise ValueError(
            "TF_CONFIG is not a JSON object; expected "
            '{"cluster": {...}, "task": {"type": ..., "index": ...}}'
        )
    return config


def _refuse_other_than_object(value, key, example):
    if not isinstance(value, dict):
        raise ValueError(
            "TF_CONFIG's %s is %s; expected a JSON object, e.g. %s"
            % (key, json.dumps(value), example)
        )


def _workers(cluster):
    """The suite's workers, the chief then the workers, of TF_CONFIG's
    cluster: known jobs, each a list of "HOST:PORT"."""
    unknown = sorted(set(cluster) - set(KNOWN_JOBS))
    if unknown:
        raise ValueError(
            "TF_CONFIG names job(s) %s; the cluster mode runs only ps, "
            "worker and chief tasks" % ", ".join(unknown)
        )
    for job, hosts in sorted(cluster.items()):
        if not isinstance(hosts, list) or not all(
            isinstance(host, str) for host in hosts
        ):
            raise ValueError(
                'TF_CONFIG\'s %s job is %s; expected a list of "HOST:PORT" '
                'strings, e.g. ["localhost:2222"]' % (job, json.dumps(hosts))
            )
        for host in hosts:
            # One task per entry: the host flags' commas are not TF_CONFIG's.
            if "," in host or not host.strip():
                raise ValueError(
                    'TF_CONFIG\'s %s job lists "%s"; expected one "HOST:PORT" '
                    "per entry, e.g. %s"
                    % (job, host, json.dumps(_hosts(host).split(",")))
                )
    chiefs = cluster.get("chief", [])
    if len(chiefs) > 1:
        # Two chiefs would both initialise, checkpoint and lead the group.
        raise ValueError(
            "TF_CONFIG's chief job lists %d tasks (%s); a cluster has one "
            "chief: list the others under worker"
            % (len(chiefs), ", ".join(chiefs))
        )
    workers = list(chiefs) + list(cluster.get("worker", []))
    if not workers:
        raise ValueError(
            "TF_CONFIG's cluster has jobs %s; the cluster mode needs a "
            "worker or chief job" % ", ".join(sorted(cluster))
        )
    return workers


def _task(task, cluster):
    """TF_CONFIG's task: (str, int), its type and its index in that job."""
    job_type, index = task.get("type"), task.get("index", 0)
    if job_type not in KNOWN_JOBS:
        raise ValueError(
            "TF_CONFIG's task type is %r; expected ps, worker or chief"
            % job_type
        )
    num_tasks = len(cluster.get(job_type, []))
    if isinstance(index, bool) or not isinstance(index, int):
        raise ValueError(
            "TF_CONFIG's task index is %s; expected a whole number, e.g. 0"
            % json.dumps(index)
        )
    if not 0 <= index < num_tasks:
        raise ValueError(
            "TF_CONFIG's task index %r is out of range: its %s job has %d "
            "task(s)" % (index, job_type, num_tasks)
        )
    return job_type, index


def resolve(from_flags, text):
    """The `ClusterFlags` of a task: TF_CONFIG's (text) when the flags
    name no cluster, otherwise the flags', which must agree with it."""
    from_env = parse(text)
    if from_env is None:
        return from_flags
    if not from_flags.ps_hosts and not from_flags.worker_hosts:
        return from_env
    # The flags' host lists written as `parse` writes them.
    normalised = from_flags._replace(
        ps_hosts=_hosts(from_flags.ps_hosts),
        worker_hosts=_hosts(from_flags.worker_hosts),
    )
    for field, flag_value, env_value in zip(
        ClusterFlags._fields, normalised, from_env
    ):
        if flag_value != env_value:
            raise ValueError(
                "--%s=%s disagrees with TF_CONFIG, which gives %s; set the "
                "cluster in one place (unset TF_CONFIG or drop the flags)"
                % (field, flag_value, env_value)
            )
    return from_flags


def _hosts(hosts):
    return ",".join(h.strip() for h in hosts.split(",") if h.strip())
