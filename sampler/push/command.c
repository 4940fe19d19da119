/* Options of `kprof push`. */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "common/cli.h"
#include "common/units.h"
#include "push/run.h"
#include "record/node_options.h"

static const char usage[] =
    "Usage: kprof push --node NODE [OPTIONS]\n"
    "\n"
    "Profiles nodes without end and sends each node's profile of every\n"
    "--interval to an OpenTelemetry Collector, Grafana Pyroscope or Parca, as\n"
    "OTLP profiles (v1development): the node's CPU, sampled natively where it\n"
    "can be (profile 'cpu', nanoseconds: Erlang, C and kernel frames), and its\n"
    "busiest processes' stacks and metrics (beam_samples, beam_reductions,\n"
    "beam_memory, beam_message_queue_len, beam_bin_vheap). A node that is not\n"
    "there yet, stops or restarts is attached again; SIGTERM sends the last\n"
    "window and exits 0.\n"
    "\n"
    "Where to send, from the OpenTelemetry exporter's environment\n"
    "(OTEL_EXPORTER_OTLP_[PROFILES_]ENDPOINT, _PROTOCOL, _HEADERS, _CERTIFICATE,\n"
    "_CLIENT_CERTIFICATE, _CLIENT_KEY, _COMPRESSION, _TIMEOUT, _INSECURE;\n"
    "OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES), which these options override:\n"
    "      --endpoint URL       the URL as is: http://host:4318/v1development/profiles,\n"
    "                           or for gRPC http://host:4317 [http://localhost:4318/...]\n"
    "      --protocol P         http/protobuf | grpc [http/protobuf]\n"
    "      --headers-file FILE  headers to send, 'Name: value' lines (Authorization,\n"
    "                           X-Scope-OrgID): secrets stay off the command line\n"
    "      --ca-file FILE       the CA certificates that sign the endpoint's [system's]\n"
    "      --compression C      gzip | none [none]\n"
    "      --timeout T          of one export [10s]\n"
    "      --service-name NAME  the resource's service.name [the node's name before @]\n"
    "Nodes and sampling (as for kprof record):\n"
    "  -n, --node NODE          node to profile; repeat it for several\n"
    "      --all-nodes          also every node connected to the first, now or later\n"
    "      --cookie-file FILE   [$KPROF_COOKIE, else ~/.erlang.cookie]\n"
    "      --connect-timeout T  [5s]\n"
    "      --interval T         a window, one export per node [10s]\n"
    "      --cpu-rate HZ        native CPU samples per second per thread, 0 = off [97]\n"
    "  -t, --top N              processes sampled cooperatively [20]\n"
    "  -r, --rate HZ            their samples per second [1]\n"
    "      --select-by WHAT     reductions | memory | message_queue_len | bin_vheap |\n"
    "                           total_heap_size [reductions]\n"
    "      --depth N            deepest stack kept, in frames [64]\n"
    "      --erlang-names       Elixir functions as Erlang names them\n"
    "Unattended:\n"
    "      --queue N            windows kept while the backend is down; the oldest\n"
    "                           go first [60]\n"
    "      --status-every T     a status line every T, 0 = never [5m]\n"
    "      --flush-timeout T    at SIGTERM, the time the last windows have [5s]\n"
    "  -h, --help               show this help and exit\n"
    "\n"
    "Examples:\n"
    "  OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4318 kprof push -n app@host\n"
    "  kprof push -n app --protocol grpc --endpoint https://pyroscope:4040 \\\n"
    "      --headers-file /etc/kprof/headers --ca-file /etc/ssl/ca.pem\n"
    "\n"
    "Exit status: 0 stopped by a signal, 1 failure, 2 usage error.\n";

enum {
    OPT_CPU_RATE = KP_OPT_NODE_END,
    OPT_INTERVAL,
    OPT_ENDPOINT,
    OPT_PROTOCOL,
    OPT_HEADERS_FILE,
    OPT_CA_FILE,
    OPT_COMPRESSION,
    OPT_TIMEOUT,
    OPT_SERVICE,
    OPT_QUEUE,
    OPT_STATUS,
    OPT_FLUSH
};

static const struct option options[] = {KP_NODE_OPTIONS,
                                        {"rate", required_argument, NULL, 'r'},
                                        {"cpu-rate", required_argument, NULL, OPT_CPU_RATE},
                                        {"interval", required_argument, NULL, OPT_INTERVAL},
                                        {"endpoint", required_argument, NULL, OPT_ENDPOINT},
                                        {"protocol", required_argument, NULL, OPT_PROTOCOL},
                                        {"headers-file", required_argument, NULL, OPT_HEADERS_FILE},
                                        {"ca-file", required_argument, NULL, OPT_CA_FILE},
                                        {"compression", required_argument, NULL, OPT_COMPRESSION},
                                        {"timeout", required_argument, NULL, OPT_TIMEOUT},
                                        {"service-name", required_argument, NULL, OPT_SERVICE},
                                        {"queue", required_argument, NULL, OPT_QUEUE},
                                        {"status-every", required_argument, NULL, OPT_STATUS},
                                        {"flush-timeout", required_argument, NULL, OPT_FLUSH},
                                        {"help", no_argument, NULL, 'h'},
                                        {NULL, 0, NULL, 0}};

/* The sampling options: record's (kp_node_option), and push's rates. */
static int sampling_option(int opt, const char *arg, kp_record_options *r, const char **nodes)
{
    switch (opt) {
    case 'r':
        if (kp_parse_rate(arg, 1000, &r->rate) != 0)
            return kp_bad_value("--rate", arg, "samples per second, above 0 and up to 1000");
        return KP_EXIT_OK;
    case OPT_CPU_RATE: return kp_parse_cpu_rate_option(arg, &r->cpu_rate);
    default: return kp_node_option(opt, arg, r, nodes);
    }
}

/* The options of push itself, applied over the environment's settings. */
static int push_option(int opt, const char *arg, kp_push_options *o, kp_push_config *c)
{
    char err[1024];
    uint64_t v;
    switch (opt) {
    case OPT_INTERVAL:
        if (kp_parse_duration(arg, &o->interval_us) != 0 || o->interval_us < 1000000 ||
            o->interval_us > 3600000000u)
            return kp_bad_value("--interval", arg, "a duration from 1s to 1h");
        return KP_EXIT_OK;
    case OPT_ENDPOINT:
        if (kp_push_config_set_endpoint(c, arg, 0, "--endpoint", err, sizeof err) != 0)
            break;
        return KP_EXIT_OK;
    case OPT_PROTOCOL:
        if (kp_push_config_set_protocol(c, arg, "--protocol", err, sizeof err) != 0)
            break;
        return KP_EXIT_OK;
    case OPT_HEADERS_FILE:
        if (kp_push_config_read_headers_file(c, arg, err, sizeof err) != 0)
            break;
        return KP_EXIT_OK;
    case OPT_CA_FILE:
        if (kp_push_config_set_file(&c->ca_file, arg, "--ca-file", err, sizeof err) != 0)
            break;
        return KP_EXIT_OK;
    case OPT_COMPRESSION:
        if (strcmp(arg, "gzip") != 0 && strcmp(arg, "none") != 0)
            return kp_bad_value("--compression", arg, "use gzip or none");
        c->gzip = strcmp(arg, "gzip") == 0;
        return KP_EXIT_OK;
    case OPT_TIMEOUT:
        if (kp_parse_duration(arg, &v) != 0 || v < 1000 || v > KP_PUSH_MAX_TIMEOUT_MS * 1000ull)
            return kp_bad_value("--timeout", arg, "a duration from 1ms to 10m");
        c->timeout_ms = (unsigned)(v / 1000);
        return KP_EXIT_OK;
    case OPT_SERVICE: o->service_name = arg; return KP_EXIT_OK;
    case OPT_QUEUE:
        if (kp_parse_uint(arg, 1, 100000, &v) != 0)
            return kp_bad_value("--queue", arg, "a number of windows from 1 to 100000");
        o->limits.max_windows = (size_t)v;
        return KP_EXIT_OK;
    case OPT_STATUS:
        if (strcmp(arg, "0") == 0)
            o->status_every_us = 0;
        else if (kp_parse_duration(arg, &o->status_every_us) != 0)
            return kp_bad_value("--status-every", arg, "a duration such as 5m, or 0");
        return KP_EXIT_OK;
    case OPT_FLUSH:
        if (kp_parse_duration(arg, &v) != 0 || v > 600000000u)
            return kp_bad_value("--flush-timeout", arg, "a duration up to 10m");
        o->flush_ms = v / 1000;
        return KP_EXIT_OK;
    default: return -1;
    }
    kp_error("%s", err);
    return KP_EXIT_USAGE;
}

int kp_cmd_push(int argc, char **argv)
{
    static const char *nodes[KP_MAX_NODE_OPTIONS];
    static kp_push_config config;
    kp_push_config_free(&config);
    memset(&config, 0, sizeof config);
    char err[1024];
    if (kp_push_config_from_env(&config, kp_push_getenv, NULL, err, sizeof err) != 0) {
        kp_error("%s", err);
        return KP_EXIT_USAGE;
    }
    kp_push_options o = {.record = {.connect_timeout_ms = 5000,
                                    .top = 20,
                                    .select_by = "reductions",
                                    .reselect_us = 5000000,
                                    .rate = 1,
                                    .depth = 64,
                                    .cpu_rate = 97},
                         .interval_us = 10000000,
                         .status_every_us = 300000000,
                         .flush_ms = 5000,
                         .config = &config,
                         .limits = kp_push_default_limits()};
    int opt, rc = KP_EXIT_OK;
    optind = 1;
    opterr = 0;
    while (rc == KP_EXIT_OK && (opt = getopt_long(argc, argv, ":n:t:r:h", options, NULL)) != -1) {
        if (opt == 'h') {
            fputs(usage, stdout);
            return KP_EXIT_OK;
        }
        rc = sampling_option(opt, optarg, &o.record, nodes);
        if (rc < 0)
            rc = push_option(opt, optarg, &o, &config);
        if (rc < 0)
            rc = kp_bad_option("push", opt, argv[optind - 1]);
    }
    if (rc == KP_EXIT_OK && optind < argc)
        rc = kp_unexpected_argument("push", argv[optind]);
    if (rc == KP_EXIT_OK && !o.record.n_nodes) {
        kp_error("which node? add --node NAME@HOST");
        rc = KP_EXIT_USAGE;
    }
    if (rc == KP_EXIT_OK) {
        o.record.nodes = nodes;
        rc = kp_push_run(&o);
    }
    kp_push_config_free(&config);
    return rc;
}
