// The weir coordinator. With no arguments it starts a local cluster on the
// embedded tiny model: it spawns --workers worker processes and the EPLB
// service, waits until every worker is registered and loaded, prints one
// "weir ready" line, and serves until SIGINT/SIGTERM. With --expect_workers=N
// it spawns nothing and waits for N remote workers started with
// --coordinator=HOST:PORT.
//
// Size: past the 800-line budget on purpose. The coordinator's 58
// command-line flags (the first 200 lines) are defined here with main, as
// every weir process keeps its flags beside its main, and Run is the start-up
// sequence read top to bottom; splitting either would scatter one of them.

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <string>

#include "absl/cleanup/cleanup.h"
#include "absl/flags/flag.h"

#include <filesystem>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "base/grpc_util.h"
#include "grpcpp/resource_quota.h"
#include "base/init.h"
#include "base/logging.h"
#include "base/model_summary.h"
#include "base/signals.h"
#include "base/status_macros.h"
#include "coordinator/api_key_interceptor.h"
#include "coordinator/batch_client.h"
#include "coordinator/batch_jobs_service.h"
#include "coordinator/cluster_controller.h"
#include "coordinator/cluster_state.h"
#include "coordinator/control_service.h"
#include "coordinator/http/http_server.h"
#include "coordinator/http/metrics.h"
#include "coordinator/http/metrics_interceptor.h"
#include "coordinator/inference_service.h"
#include "coordinator/kv_capacity.h"
#include "coordinator/launcher.h"
#include "coordinator/model_provisioning.h"
#include "coordinator/parse_error_interceptor.h"
#include "coordinator/request_builder.h"
#include "coordinator/startup.h"
#include "coordinator/step_driver.h"
#include "tokenizer/tokenizer.h"
#include "tools/cpp/runfiles/runfiles.h"
#include "coordinator/speculation_flags.h"
#include "worker/model/config.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:50051",
          "Address of the public gRPC server (port 0 picks one). It also serves the control "
          "plane (registration, expert-map commits) for remote workers.");
ABSL_FLAG(std::string, control_listen, "auto",
          "Address of the control-plane gRPC server that the local workers and EPLB register "
          "with and watch: its own port and threads, so client load on --listen cannot starve "
          "their liveness checks. \"auto\" = the host of --listen on a free port; \"off\" = "
          "the public server only.");
ABSL_FLAG(int, workers, 2, "Local cluster: number of worker processes to start.");
ABSL_FLAG(int, expect_workers, 0,
          "Multi-node: start no workers and wait for this many remote workers to register.");
ABSL_FLAG(bool, eplb, true, "Local cluster: also start the EPLB service.");
ABSL_FLAG(std::string, model_dir, "", "Model directory (config.json); default: the tiny model.");
ABSL_FLAG(std::string, worker_binary, "", "Worker executable; default: the one built with us.");
ABSL_FLAG(std::string, eplb_binary, "", "EPLB executable; default: the one built with us.");
ABSL_FLAG(int, startup_timeout_s, 120, "Give up if the workers are not ready by then.");
ABSL_FLAG(int, health_interval_ms, 500, "Worker liveness check period.");
ABSL_FLAG(int, health_failures, 3, "Consecutive failed checks before a worker is DEAD.");
ABSL_FLAG(int, stop_grace_s, 5, "Time children get to exit before SIGKILL.");
ABSL_FLAG(std::string, model_cache_dir, "",
          "Where generated weights for a config-only model directory go; default "
          "~/.cache/weir/models.");
ABSL_FLAG(uint64_t, weights_seed, 0, "Seed of generated weights (config-only model dirs).");
ABSL_FLAG(bool, zero_overhead, true,
          "Send plan t+1 before result t arrives (inputs resolved on the worker).");
ABSL_FLAG(std::string, speculative, "off",
          "Speculative decoding: off; dspark (every decode step verifies the DSpark drafts "
          "of the step before and drafts the next block, with prompt lookup beside them); or "
          "ngram (prompt lookup alone, on any model: a sequence whose last --ngram_lookup tokens "
          "occurred before in it verifies the tokens that followed them there). Greedy and "
          "seeded outputs equal off's, structured output and logprobs included.");
ABSL_FLAG(int, num_draft_tokens, 0,
          "--speculative=dspark: drafts verified per decode step, 1 .. the model's "
          "dspark_block_size; 0 = the block size. --speculative=ngram: the tokens a lookup "
          "proposes, 1 .. 16; 0 = 5.");
ABSL_FLAG(std::string, verify_length, "",
          "--speculative=dspark or ngram: how many of its drafts a decode step verifies: fixed "
          "(all of them; the default), or confidence (per request, the length with the most "
          "expected tokens per unit of step cost: DSpark's confidence head, or for a lookup how "
          "far its match reaches, against the cost curve verify_cost.json in the model "
          "directory, from tools/bench:speculative --profile_verify, or one the workers "
          "measure at start: CUDA workers and ngram always, CPU workers when the directory has "
          "none; a sequence whose DSpark drafts do not pay for themselves pauses drafting a "
          "while). Outputs are the same.");
ABSL_FLAG(int, speculative_max_batch, 0,
          "--speculative=dspark or ngram: a worker step with more speculative rows than this "
          "drafts nothing, so they decode at the plain rate until the batch is smaller again "
          "(at large batches a verification's extra positions and the draft pass cost more "
          "than the drafts return; vLLM's speculative_disable_by_batch_size). 0 = no limit. "
          "Outputs are the same.");
ABSL_FLAG(int, ngram_lookup, -1,
          "Prompt lookup (--speculative=dspark: beside DSpark's drafts; ngram: alone). After its "
          "sample, a sequence whose last N tokens occurred before in it (prompt or output) "
          "takes the tokens that followed them there as its drafts and skips the DSpark draft "
          "pass (vLLM's ngram method). N = this match length (the shortest, with "
          "--ngram_lookup_max); 0 = off (refused with --speculative=ngram); unset = 3 with "
          "speculation on. Outputs are the same.");
ABSL_FLAG(int, ngram_lookup_max, 0,
          "With prompt lookup: the longest match tried first; lengths from this down to "
          "--ngram_lookup are tried in turn and the longest that matches proposes (vLLM's "
          "prompt_lookup_max .. prompt_lookup_min). 0 = --ngram_lookup alone. With "
          "--speculative=ngram, --ngram_lookup=1 --ngram_lookup_max=4 makes more tokens a step "
          "than the default 3 but verifies more drafts: for GPUs at small batches.");
ABSL_FLAG(int, ngram_lookup_tokens, 0,
          "--speculative=dspark with prompt lookup: how many tokens a lookup proposes (0 = "
          "--num_draft_tokens). More than DSpark's block verifies a long repetition in one "
          "step (each speculative row is then booked for as many); at most 16.");
ABSL_FLAG(bool, ced_replay, false,
          "CED bounded replay (spec 4.4): a prompt runs the decoder half of the layers only over "
          "its last sliding-window positions (the global KV stays exact); faster prefill, "
          "approximate outputs. Off by default: weir's models were not trained for it (the "
          "V4.1-Flash card's setting is on). Requests with prompt logprobs prefill exactly. "
          "CPU backend only.");
ABSL_FLAG(bool, kv_check_every_step, false,
          "Debug: check every rank's KV books (VerifyAccounting) and a mirror of what each "
          "worker holds after every step's plans and every release; a leaked or "
          "double-owned block stops the step loop with INTERNAL. Off: no cost.");
ABSL_FLAG(int, kv_blocks_per_rank, 0,
          "Tests: book at most this many KV blocks per rank (0: every block the workers "
          "report; the pools are sized by the workers' --kv_cache_bytes).");
ABSL_FLAG(int, kv_block_tokens, 64,
          "Token positions per KV block; every worker sizes its pool in blocks of this many "
          "positions (every compress ratio of the model must divide it).");
ABSL_FLAG(int, max_seqs_per_rank, 64,
          "Concurrent sequences per rank (at most the sequence slots the workers report, "
          "worker --max_slots).");
ABSL_FLAG(int, max_prefill_tokens, 2048, "Token budget of one prefill step per rank.");
ABSL_FLAG(int, prefill_attempt_interval, 70,
          "While sequences decode, a prefill step is tried every this many decode steps when "
          "every rank has prefill work (lower: shorter time to first token under load, "
          "fewer decode steps per second).");
ABSL_FLAG(int, prefill_any_attempt_interval, 100,
          "The same when any rank has prefill work (bounds an isolated rank's wait).");
ABSL_FLAG(int, max_running_per_tenant, 0,
          "Most sequences of one tenant (GenerateRequest.tenant, HTTP `user`) running at once "
          "per rank; 0 = no limit. Within a priority the tenant with the fewest running is "
          "admitted first either way.");
ABSL_FLAG(int, default_max_new_tokens, 256, "max_new_tokens of requests that set none.");
ABSL_FLAG(std::string, backend, "cpu",
          "Local cluster: the workers' backend, cpu or cuda (worker r on GPU r mod the "
          "visible devices).");
ABSL_FLAG(std::string, numerics, "fast",
          "Local cluster, --backend=cuda: the workers' decode numerics: fast (tensor cores on "
          "the stored FP8/MXFP4 forms; batch-invariant) or reference (bit-identical to the CPU).");
ABSL_FLAG(std::vector<std::string>, worker_flags, {},
          "Local cluster: extra flags for every worker, comma-separated, e.g. "
          "--worker_flags=--gpu_memory_fraction=0.5");
ABSL_FLAG(int, num_redundant_experts, 0,
          "Extra routed-expert slots per MoE layer (over all ranks) that EPLB may fill "
          "with replicas of hot experts; the slots are rounded up to a multiple of the "
          "workers.");
ABSL_FLAG(std::string, eplb_flags, "",
          "Local cluster: extra flags for the EPLB service, space-separated, e.g. "
          "\"--rearrange_interval=4 --gain_threshold=0.02\".");
ABSL_FLAG(int, eplb_stat_interval, 128,
          "Every this many steps the workers' expert load goes to the EPLB service.");
ABSL_FLAG(double, drain_timeout_s, 30,
          "On SIGTERM/SIGINT: new requests are refused (UNAVAILABLE) while those in flight "
          "run on for up to this long; the rest then fail with \"server is stopping\". A "
          "second signal aborts at once.");
ABSL_FLAG(bool, recover_workers, true,
          "When a step fails because of a worker (it died, hung past --step_timeout_s or failed "
          "its step), bring the worker group up again at a new group epoch and resume every "
          "request from the tokens it already has. Local cluster: the group is replaced with "
          "fresh processes. Remote workers (--expect_workers): a lost worker's rank waits "
          "--rejoin_timeout_s for a worker to register for it, the survivors re-initialise. "
          "Off: such a failure fails every request in flight.");
ABSL_FLAG(double, rejoin_timeout_s, 60,
          "Remote workers: how long a recovery waits for a worker to register for each lost "
          "rank (restarted by an operator or a supervisor); past it the step loop stops, "
          "requests fail and health says NOT_SERVING with the cause in GetServerState.");
ABSL_FLAG(int, max_recoveries, 3,
          "Worker-group recoveries allowed within 10 minutes; one more fails the requests.");
ABSL_FLAG(double, step_timeout_s, 60,
          "A worker that leaves the step loop waiting this long for one step (at least 20x "
          "the slowest recent step) is failed: the loop stops with DEADLINE_EXCEEDED naming "
          "it instead of hanging (a stopped or hung worker). 0 = no deadline.");
ABSL_FLAG(int, max_queued_requests, 4096,
          "Unfinished requests beyond which new ones get RESOURCE_EXHAUSTED.");
ABSL_FLAG(int64_t, max_queued_prompt_tokens, int64_t{1} << 22,
          "Prompt tokens of unfinished requests beyond which new ones get RESOURCE_EXHAUSTED.");
ABSL_FLAG(int, batch_jobs_concurrency, 2, "Batch jobs (BatchJobs API) that run at once.");
ABSL_FLAG(int, batch_job_max_in_flight, 16,
          "Items of one BATCH-priority batch job in the step loop at once.");
ABSL_FLAG(std::string, batch_input_root, "",
          "Directory batch jobs may read file:// inputs from (empty: file inputs are off).");
ABSL_FLAG(int64_t, batch_result_ttl_s, 24 * 3600,
          "How long an ended batch job and its results are kept (in memory).");
ABSL_FLAG(std::string, input, "",
          "Offline mode: run this JSON Lines batch through the server, write --output, exit.");
ABSL_FLAG(std::string, output, "", "Offline mode: results (JSON Lines); default stdout.");
ABSL_FLAG(std::string, address_file, "",
          "If set, write the bound HOST:PORT here as soon as the server listens (for "
          "launchers that start remote workers).");
ABSL_FLAG(std::string, http_listen, "auto",
          "Address of the OpenAI-compatible HTTP server (and /metrics, /health, /ready): "
          "HOST:PORT (port 0 picks one), \"off\", or \"auto\" = the host of --listen on port "
          "8000, or on port 0 when --listen asks for port 0.");
ABSL_FLAG(std::string, http_address_file, "",
          "If set, write the HTTP server's bound HOST:PORT here once it listens; default "
          "<--address_file>.http when --address_file is set.");
ABSL_FLAG(int, http_threads, 64, "Threads serving HTTP requests (one per open connection).");
ABSL_FLAG(int, api_threads, 4,
          "Threads that admit the public API's streaming calls and turn step-loop events into "
          "messages (the calls themselves hold no thread).");
ABSL_FLAG(int, api_sync_max_threads, 32,
          "At most this many threads of the public server's synchronous handlers (BatchJobs, "
          "the Coordinator service for remote workers, reflection); past it such calls are "
          "RESOURCE_EXHAUSTED. The control plane has its own.");
ABSL_FLAG(int64_t, http_max_body_bytes, int64_t{16} << 20, "Larger HTTP request bodies get 413.");
ABSL_FLAG(int, http_max_headers, 128, "HTTP requests with more headers get 431.");
ABSL_FLAG(std::string, api_key, "",
          "If set, HTTP requests need \"Authorization: Bearer <key>\" (401 otherwise) and "
          "public gRPC calls (Inference, BatchJobs, reflection) the metadata "
          "\"authorization: Bearer <key>\" (UNAUTHENTICATED otherwise); the internal "
          "weir.v1.Coordinator service stays open.");
ABSL_FLAG(std::string, api_key_file, "",
          "Read the API key from this file (first line) instead of --api_key.");
ABSL_FLAG(bool, http_open_health_and_metrics, true,
          "With an API key, HTTP /health, /ready, /metrics and gRPC grpc.health.v1.Health "
          "still answer without one.");

namespace weir::coordinator {
namespace {

using bazel::tools::cpp::runfiles::Runfiles;

constexpr char kUsage[] =
    "weir coordinator.\n"
    "  main                         local cluster: 2 workers + EPLB on the tiny model\n"
    "  main --expect_workers=N      wait for N remote workers (worker --coordinator=HOST:PORT)";

// The speculative-decoding flags as given (SpeculationFromFlags checks them).
SpeculationFlags SpeculationFlagsFromFlags() {
  return {.mode = absl::GetFlag(FLAGS_speculative),
          .num_draft_tokens = absl::GetFlag(FLAGS_num_draft_tokens),
          .verify_length = absl::GetFlag(FLAGS_verify_length),
          .max_batch = absl::GetFlag(FLAGS_speculative_max_batch),
          .ngram_lookup = absl::GetFlag(FLAGS_ngram_lookup),
          .ngram_lookup_max = absl::GetFlag(FLAGS_ngram_lookup_max),
          .ngram_lookup_tokens = absl::GetFlag(FLAGS_ngram_lookup_tokens)};
}

// The step loop's options: scheduler limits from the flags, the KV layout
// from what the workers reported, EPLB statistics from the model.
StepDriverOptions DriverOptionsFromFlags(const model::ModelConfig& config,
                                         const ModelSummary& model, uint64_t epoch,
                                         const std::string& eplb_address,
                                         const scheduler::KvLayout& kv) {
  StepDriverOptions driver_options;
  driver_options.epoch = epoch;
  driver_options.zero_overhead = absl::GetFlag(FLAGS_zero_overhead);
  driver_options.kv_check_every_step = absl::GetFlag(FLAGS_kv_check_every_step);
  driver_options.max_requests = absl::GetFlag(FLAGS_max_queued_requests);
  driver_options.max_prompt_tokens = absl::GetFlag(FLAGS_max_queued_prompt_tokens);
  driver_options.step_timeout = absl::GetFlag(FLAGS_step_timeout_s) > 0
                                    ? absl::Seconds(absl::GetFlag(FLAGS_step_timeout_s))
                                    : absl::InfiniteDuration();
  // Without routed experts there is nothing to balance.
  driver_options.eplb_address = config.n_routed_experts > 0 ? eplb_address : "";
  driver_options.stat_interval = absl::GetFlag(FLAGS_eplb_stat_interval);
  driver_options.rank.kv = kv;
  driver_options.rank.max_model_len = model.max_context_tokens;
  driver_options.rank.max_prefill_tokens = absl::GetFlag(FLAGS_max_prefill_tokens);
  driver_options.rank.max_decode_batch = absl::GetFlag(FLAGS_max_seqs_per_rank);
  driver_options.rank.max_running_per_tenant = absl::GetFlag(FLAGS_max_running_per_tenant);
  // Checked against the model at start-up (Run). A row is booked for the
  // most drafts it may verify: DSpark's, or a longer lookup's.
  const Speculation speculation =
      SpeculationFromFlags(SpeculationFlagsFromFlags(), config).value_or(Speculation{});
  driver_options.rank.num_draft_tokens = speculation.max_draft_tokens();
  driver_options.speculative = absl::GetFlag(FLAGS_speculative);
  driver_options.verify_length = speculation.verify_length;
  driver_options.policy.prefill_attempt_interval = absl::GetFlag(FLAGS_prefill_attempt_interval);
  driver_options.policy.prefill_any_attempt_interval =
      absl::GetFlag(FLAGS_prefill_any_attempt_interval);
  for (int64_t eos : model.eos_token_ids) {
    driver_options.rank.eos_token_ids.push_back(static_cast<uint32_t>(eos));
  }
  return driver_options;
}

// The API key from --api_key_file (first line) or --api_key.
absl::StatusOr<std::string> ApiKey() {
  const std::string path = absl::GetFlag(FLAGS_api_key_file);
  if (path.empty()) return absl::GetFlag(FLAGS_api_key);
  std::ifstream in(path);
  std::string key;
  if (!in || !std::getline(in, key) || key.empty()) {
    return absl::InvalidArgumentError("cannot read an API key from --api_key_file " + path);
  }
  return key;
}

int Run(int argc, char** argv) {
  absl::Notification stop;
  InitProcess(argc, argv, kUsage, "coordinator");
  HoldGrpcForProcess();
  InstallTerminationHandler([&stop](int signo, int count) {
    if (count == 1) {
      WEIR_LOG(INFO) << "signal " << signo << ": shutting down (again to abort)";
      stop.Notify();
      return;
    }
    // Immediate abort: children die with us through PR_SET_PDEATHSIG.
    WEIR_LOG(WARNING) << "second signal: aborting now";
    _exit(1);
  });

  std::string error;
  std::unique_ptr<Runfiles> runfiles(Runfiles::Create(argv[0], &error));
  const int expect_remote = absl::GetFlag(FLAGS_expect_workers);
  const bool local = expect_remote == 0;
  const int world = local ? absl::GetFlag(FLAGS_workers) : expect_remote;
  if (world < 1) {
    std::cerr << "weir: need at least one worker (--workers / --expect_workers)\n";
    return 2;
  }
  const std::string source_dir =
      Locate(runfiles.get(), absl::GetFlag(FLAGS_model_dir), "weir/models/tiny");
  std::string cache_dir = absl::GetFlag(FLAGS_model_cache_dir);
  if (cache_dir.empty()) cache_dir = DefaultModelCacheDir();
  absl::StatusOr<std::string> weights_dir =
      EnsureWeights(source_dir, cache_dir, absl::GetFlag(FLAGS_weights_seed));
  if (!weights_dir.ok()) {
    std::cerr << "weir: cannot prepare weights for " << source_dir << ": "
              << weights_dir.status() << "\n";
    return 1;
  }
  const std::string model_dir = *weights_dir;
  absl::StatusOr<ModelSummary> model = LoadModelSummary(model_dir);
  if (model.ok()) model->name = std::filesystem::path(source_dir).filename().string();
  if (!model.ok()) {
    std::cerr << "weir: cannot load model from " << model_dir << ": " << model.status() << "\n";
    return 1;
  }

  absl::StatusOr<model::ModelConfig> config = model::LoadModelConfig(model_dir + "/config.json");
  if (!config.ok()) {
    std::cerr << "weir: " << config.status() << "\n";
    return 1;
  }
  if (absl::GetFlag(FLAGS_backend) != "cpu" && absl::GetFlag(FLAGS_backend) != "cuda") {
    std::cerr << "weir: --backend must be cpu or cuda\n";
    return 2;
  }
  if (absl::GetFlag(FLAGS_numerics) != "fast" && absl::GetFlag(FLAGS_numerics) != "reference") {
    std::cerr << "weir: --numerics must be fast or reference\n";
    return 2;
  }
  absl::StatusOr<Speculation> speculation =
      SpeculationFromFlags(SpeculationFlagsFromFlags(), *config);
  if (!speculation.ok()) {
    std::cerr << "weir: " << speculation.status().message() << "\n";
    return 2;
  }
  // --backend=cuda speculates on the device decoder (it drafts, verifies and
  // rolls back there: worker --device_decode, with more ranks
  // --device_decode_ep); a worker that cannot refuses the model load with
  // FAILED_PRECONDITION naming why.
  if (absl::GetFlag(FLAGS_ced_replay) && absl::GetFlag(FLAGS_backend) == "cuda") {
    // Not run on a GPU yet (the replay is in the model's forward, which CudaOps
    // would run, and the device decoder would take the sequences after it).
    std::cerr << "weir: --ced_replay runs on --backend=cpu only (not yet run on a GPU)\n";
    return 2;
  }
  const int redundant = absl::GetFlag(FLAGS_num_redundant_experts);
  if (redundant < 0 || redundant > 64 * std::max<int64_t>(1, config->n_routed_experts)) {
    std::cerr << "weir: --num_redundant_experts must be in [0, 64 x routed experts]\n";
    return 2;
  }

  std::random_device entropy;
  const uint64_t epoch = (uint64_t{entropy()} << 32) ^ entropy() ^ getpid();
  ClusterState cluster(world);
  // Remote workers with recovery: a lost worker's rank is freed for a
  // rejoin, so a worker finding no free rank yet retries its registration.
  cluster.set_rejoin_enabled(!local && absl::GetFlag(FLAGS_recover_workers));
  if (config->n_routed_experts > 0) {
    cluster.set_expert_map(InitialExpertMap(static_cast<int>(config->n_layers),
                                            static_cast<int>(config->n_routed_experts), world,
                                            redundant));
  }
  ClusterController controller(
      cluster, ControllerOptions{
                   .model_dir = model_dir,
                   .epoch = epoch,
                   // A remote survivor's Init at a new group epoch first
                   // ends its old step (a collective with the lost peer is
                   // aborted) and drops its model; a remote link may be slow.
                   .rpc_timeout = local ? absl::Seconds(10) : absl::Seconds(90),
                   .health_interval = absl::Milliseconds(absl::GetFlag(FLAGS_health_interval_ms)),
                   .failure_threshold = absl::GetFlag(FLAGS_health_failures),
                   .kv_block_tokens = absl::GetFlag(FLAGS_kv_block_tokens),
                   .num_draft_tokens = speculation->dspark_drafts,
                   .ced_replay = absl::GetFlag(FLAGS_ced_replay),
                   .verify_length = speculation->verify_length,
                   .measure_verify_cost = MeasureVerifyCost(
                       speculation->verify_length, absl::GetFlag(FLAGS_backend), model_dir),
                   .speculative_max_batch = speculation->max_batch,
                   .ngram_lookup = speculation->ngram_lookup,
                   .ngram_lookup_max = speculation->ngram_lookup_max,
                   .ngram_lookup_tokens = speculation->lookup_tokens});
  std::string tokenizer_fingerprint;
  absl::StatusOr<std::unique_ptr<tokenizer::Tokenizer>> tokenizer =
      LoadTokenizer(model_dir, tokenizer_fingerprint);
  if (!tokenizer.ok()) {
    std::cerr << "weir: cannot load the tokenizer of " << model_dir << ": " << tokenizer.status()
              << "\n";
    return 1;
  }
  if (*tokenizer == nullptr) WEIR_LOG(WARNING) << "model has no tokenizer.json; Tokenize is off";
  InferenceService inference(*model, cluster, ApiLimits{}, std::move(*tokenizer),
                             tokenizer_fingerprint, absl::GetFlag(FLAGS_api_threads));
  std::unique_ptr<BatchItemBackend> batch_backend = MakeInferenceBackend(inference);
  BatchJobsService batch_jobs(
      *batch_backend,
      BatchJobsOptions{.max_concurrent_jobs = absl::GetFlag(FLAGS_batch_jobs_concurrency),
                       .batch_max_in_flight = absl::GetFlag(FLAGS_batch_job_max_in_flight),
                       .result_ttl = absl::Seconds(absl::GetFlag(FLAGS_batch_result_ttl_s)),
                       .input_root = absl::GetFlag(FLAGS_batch_input_root)});
  ControlService control(cluster, controller, epoch);
  // The same service on the control-plane server (its own threads).
  ControlService control_plane(cluster, controller, epoch);
  absl::StatusOr<std::string> api_key = ApiKey();
  if (!api_key.ok()) {
    std::cerr << "weir: " << api_key.status().message() << "\n";
    return 2;
  }
  // Fed by an interceptor on the public API's calls; served at GET /metrics.
  http::Metrics metrics;
  absl::StatusOr<StartedServer> server = StartServer(
      {.address = absl::GetFlag(FLAGS_listen),
       .max_receive_bytes = kPublicMaxRequestBytes,
       .max_send_bytes = kPublicMaxResponseBytes,
       .configure =
           [&metrics, &api_key](grpc::ServerBuilder& builder) {
             // The API key first (refused calls end UNAUTHENTICATED before
             // anything else); then parse errors: the metrics see the
             // corrected status.
             std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
                 interceptors;
             if (!api_key->empty()) {
               interceptors.push_back(MakeApiKeyInterceptorFactory(
                   {.api_key = *api_key,
                    .open_health = absl::GetFlag(FLAGS_http_open_health_and_metrics)}));
             }
             interceptors.push_back(MakeParseErrorInterceptorFactory());
             for (auto& metrics_interceptor : http::MakeMetricsInterceptors(metrics)) {
               interceptors.push_back(std::move(metrics_interceptor));
             }
             builder.experimental().SetInterceptorCreators(std::move(interceptors));
             // The public API is callback-based (no thread per stream); the
             // synchronous services left on this server get a bounded pool.
             grpc::ResourceQuota quota("weir-public");
             quota.SetMaxThreads(std::max(absl::GetFlag(FLAGS_api_sync_max_threads), 4));
             builder.SetResourceQuota(quota);
           }},
      {&inference, &batch_jobs, &control});
  if (!server.ok()) {
    std::cerr << "weir: " << server.status().message()
              << " (is another coordinator running? pick a port with --listen)\n";
    return 1;
  }
  grpc::HealthCheckServiceInterface* health = server->server->GetHealthCheckService();
  // The public API's health (Inference and BatchJobs), switched together.
  auto set_api_serving = [health](bool serving) {
    health->SetServingStatus("weir.v1.Inference", serving);
    health->SetServingStatus("weir.v1.BatchJobs", serving);
  };
  set_api_serving(false);
  health->SetServingStatus("weir.v1.Coordinator", true);
  WEIR_LOG(INFO) << "listening on " << server->address << " (epoch " << epoch << ")";
  // The control plane: the local workers' and EPLB's address.
  std::string control_address = server->address;
  std::optional<StartedServer> control_server;
  if (const std::string flag = absl::GetFlag(FLAGS_control_listen); flag != "off") {
    const std::string listen = absl::GetFlag(FLAGS_listen);
    const std::string address =
        flag == "auto" ? listen.substr(0, listen.rfind(':')) + ":0" : flag;
    absl::StatusOr<StartedServer> started = StartServer({.address = address}, {&control_plane});
    if (!started.ok()) {
      std::cerr << "weir: control plane: " << started.status().message()
                << " (pick an address with --control_listen, or --control_listen=off)\n";
      server->server->Shutdown(DeadlineIn(std::chrono::seconds(2)));
      return 1;
    }
    control_server = std::move(*started);
    control_server->server->GetHealthCheckService()->SetServingStatus("weir.v1.Coordinator",
                                                                        true);
    control_address = control_server->address;
    WEIR_LOG(INFO) << "control plane on " << control_address;
  }
  if (const std::string path = absl::GetFlag(FLAGS_address_file); !path.empty()) {
    if (!WriteAddressFile(path, server->address)) {
      std::cerr << "weir: cannot write --address_file " << path << "\n";
      return 1;
    }
  }
  // The OpenAI-compatible HTTP server: its own threads, our own Generate
  // handler through the in-process channel.
  std::unique_ptr<http::HttpServer> http_server;
  if (const std::string address =
          HttpAddress(absl::GetFlag(FLAGS_http_listen), absl::GetFlag(FLAGS_listen));
      !address.empty()) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(kPublicMaxResponseBytes);
    args.SetMaxSendMessageSize(kPublicMaxRequestBytes);
    const tokenizer::Tokenizer* tok = inference.tokenizer();
    http::TokenBytes token_bytes;
    if (tok != nullptr) {
      token_bytes = [tok](uint32_t id) {
        const std::string* bytes = tok->DecodedBytes(static_cast<int32_t>(id));
        return bytes == nullptr ? std::string() : *bytes;
      };
    }
    absl::StatusOr<std::unique_ptr<http::HttpServer>> started = http::HttpServer::Start(
        {.address = address,
         .threads = absl::GetFlag(FLAGS_http_threads),
         .max_body_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_http_max_body_bytes)),
         .max_headers = static_cast<size_t>(absl::GetFlag(FLAGS_http_max_headers)),
         .api_key = *api_key,
         .open_health_and_metrics = absl::GetFlag(FLAGS_http_open_health_and_metrics)},
        InProcessChannel(*server->server, args, *api_key), &metrics, std::move(token_bytes));
    if (!started.ok()) {
      std::cerr << "weir: HTTP server: " << started.status().message()
                << " (pick another address with --http_listen, or --http_listen=off)\n";
      server->server->Shutdown(DeadlineIn(std::chrono::seconds(2)));
      return 1;
    }
    http_server = std::move(*started);
    WEIR_LOG(INFO) << "HTTP (OpenAI API) on " << http_server->address();
    std::string path = absl::GetFlag(FLAGS_http_address_file);
    if (path.empty() && !absl::GetFlag(FLAGS_address_file).empty()) {
      path = absl::GetFlag(FLAGS_address_file) + ".http";
    }
    if (!path.empty() && !WriteAddressFile(path, http_server->address())) {
      std::cerr << "weir: cannot write the HTTP address file " << path << "\n";
      return 1;
    }
  }

  std::atomic<int> early_worker_exits{0};
  Launcher launcher([&](const ChildExit& exit) {
    if (exit.name.rfind("worker", 0) == 0) {
      ++early_worker_exits;
      controller.ReportExit(exit.pid, exit.Describe());
    } else if (cluster.lifecycle() != ClusterLifecycle::kStopping) {
      WEIR_LOG(ERROR) << exit.name << " " << exit.Describe()
                      << "; serving continues on the current expert map";
    }
  });

  auto shutdown = [&](int code) {
    cluster.set_lifecycle(ClusterLifecycle::kStopping);
    set_api_serving(false);
    controller.StopMonitor();
    controller.ShutdownWorkers("coordinator stopping");
    launcher.StopAll(absl::Seconds(absl::GetFlag(FLAGS_stop_grace_s)));
    if (http_server != nullptr) http_server->Stop();
    server->server->Shutdown(DeadlineIn(std::chrono::seconds(2)));
    if (control_server.has_value()) {
      control_server->server->Shutdown(DeadlineIn(std::chrono::seconds(2)));
    }
    WEIR_LOG(INFO) << "stopped";
    return code;
  };

  std::vector<std::vector<std::string>> worker_argvs;  // local workers, by rank
  if (local) {
    const std::string worker_bin =
        Locate(runfiles.get(), absl::GetFlag(FLAGS_worker_binary), "weir/worker/main");
    const std::string eplb_bin =
        Locate(runfiles.get(), absl::GetFlag(FLAGS_eplb_binary), "weir/eplb/main");
    if (absl::GetFlag(FLAGS_eplb)) {
      std::vector<std::string> eplb_argv = {eplb_bin, "--coordinator=" + control_address,
                                            "--listen=127.0.0.1:0"};
      for (absl::string_view flag :
           absl::StrSplit(absl::GetFlag(FLAGS_eplb_flags), ' ', absl::SkipEmpty())) {
        eplb_argv.emplace_back(flag);
      }
      absl::StatusOr<pid_t> pid = launcher.Spawn("eplb", eplb_argv);
      if (!pid.ok()) WEIR_LOG(ERROR) << "cannot start EPLB: " << pid.status();
    }
    for (int r = 0; r < world; ++r) {
      std::vector<std::string> worker_argv = {
          worker_bin, "--coordinator=" + control_address, "--listen=127.0.0.1:0",
          absl::StrCat("--rank=", r), "--backend=" + absl::GetFlag(FLAGS_backend),
          "--numerics=" + absl::GetFlag(FLAGS_numerics)};
      for (const std::string& flag : absl::GetFlag(FLAGS_worker_flags)) {
        worker_argv.push_back(flag);
      }
      worker_argvs.push_back(worker_argv);
      absl::StatusOr<pid_t> pid = launcher.Spawn(absl::StrCat("worker ", r), worker_argv);
      if (!pid.ok()) {
        std::cerr << "weir: cannot start worker " << r << ": " << pid.status() << "\n";
        return shutdown(1);
      }
    }
  } else {
    WEIR_LOG(INFO) << "waiting for " << world << " workers to register at " << control_address
                   << " (the control plane; " << server->address << " also takes them)";
  }

  // Wait for registrations, a signal, a dead local worker, or the timeout.
  const absl::Time deadline =
      absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_startup_timeout_s));
  while (!cluster.WaitAllRegistered(absl::Milliseconds(100))) {
    if (stop.HasBeenNotified()) return shutdown(0);
    if (early_worker_exits > 0) {
      std::cerr << "weir: a worker exited during start-up (see log above)\n";
      return shutdown(1);
    }
    if (absl::Now() > deadline) {
      std::cerr << "weir: only " << cluster.Workers().size() << " of " << world
                << " workers registered in time\n";
      return shutdown(1);
    }
  }
  // Workers learn the EPLB address at Init, so give EPLB a moment to register.
  if (local && absl::GetFlag(FLAGS_eplb)) {
    while (cluster.eplb_address().empty() && absl::Now() < deadline && !stop.HasBeenNotified()) {
      absl::SleepFor(absl::Milliseconds(50));
    }
  }
  if (absl::Status up = controller.BringUp(); !up.ok()) {
    std::cerr << "weir: start-up failed: " << up << "\n";
    return shutdown(1);
  }
  if (stop.HasBeenNotified()) return shutdown(0);

  // Every rank books the KV memory the workers reported at LoadWeights.
  std::vector<std::string> worker_addresses;
  std::vector<WorkerKvCapacity> capacities;
  for (const WorkerRecord& w : cluster.Workers()) {
    worker_addresses.push_back(w.address);
    capacities.push_back(w.kv);
  }
  absl::StatusOr<scheduler::KvLayout> kv = ClusterKvLayout(
      capacities, absl::GetFlag(FLAGS_kv_block_tokens),
      {.max_blocks = absl::GetFlag(FLAGS_kv_blocks_per_rank),
       .max_seq_slots = absl::GetFlag(FLAGS_max_seqs_per_rank)});
  if (!kv.ok()) {
    std::cerr << "weir: the workers' KV memory: " << kv.status() << "\n";
    return shutdown(1);
  }
  WEIR_LOG(INFO) << "KV per rank: " << kv->num_blocks << " blocks of " << kv->block_tokens
                 << " positions, " << kv->num_seq_slots << " sequence slots";
  // The step loop over every worker's Steps stream.
  StepDriverOptions driver_options =
      DriverOptionsFromFlags(*config, *model, epoch, cluster.eplb_address(), *kv);
  driver_options.group_epoch = [&cluster] { return cluster.group_epoch(); };
  // The loop stopped for good (a failure it could not recover from): say so.
  driver_options.on_failure = [&](const absl::Status& cause) {
    WEIR_LOG(ERROR) << "the step loop stopped: " << cause << "; NOT_SERVING until a restart";
    cluster.set_lifecycle(ClusterLifecycle::kDegraded);
    set_api_serving(false);
  };
  const bool recover_workers = absl::GetFlag(FLAGS_recover_workers);
  std::atomic<bool> recovering{false};
  std::atomic<StepDriver*> live_driver{nullptr};
  auto on_worker_change = [&] {
    if (cluster.AllReady()) return;
    set_api_serving(false);
    // A worker died (or stopped answering health checks) while the step
    // loop may be idle: ask it to replace the group now. Deaths of the
    // workers a recovery itself kills are not news.
    if (!recover_workers || recovering.load()) return;
    for (const WorkerRecord& w : cluster.Workers()) {
      if (w.status != WorkerStatus::kDead) continue;
      if (StepDriver* d = live_driver.load(); d != nullptr) {
        d->RequestRecovery(absl::UnavailableError(
            absl::StrCat("worker rank ", w.rank.value(), " is dead: ", w.detail)));
      }
      break;
    }
  };
  // Around either recovery: the flag the liveness monitor reads while it
  // runs, and after a bring-up the group's addresses with the public API
  // serving and the monitor watching again.
  struct RecoveringScope {
    explicit RecoveringScope(std::atomic<bool>& f) : flag(f) { flag = true; }
    ~RecoveringScope() { flag = false; }
    std::atomic<bool>& flag;
  };
  auto back_to_serving = [&]() {
    std::vector<std::string> addresses;
    for (const WorkerRecord& w : cluster.Workers()) addresses.push_back(w.address);
    cluster.set_lifecycle(ClusterLifecycle::kReady);
    set_api_serving(true);
    controller.StartMonitor(on_worker_change);
    return addresses;
  };
  if (recover_workers && !local) {
    // A lost remote worker cannot be respawned from here: its rank is freed
    // and the recovery waits for a worker to register for it (an operator or
    // a supervisor restarts it); then the whole group is brought up at a new
    // group epoch (the survivors drop their model and communicators and make
    // them anew, so the lost worker, should it come back, is fenced off) on
    // the committed expert map, and the step loop resumes every request.
    driver_options.max_recoveries = absl::GetFlag(FLAGS_max_recoveries);
    driver_options.recover =
        [&](const absl::Status& cause) -> absl::StatusOr<std::vector<std::string>> {
      RecoveringScope scope(recovering);
      set_api_serving(false);
      controller.StopMonitor();
      const std::vector<Rank> lost = controller.LostWorkers(/*attempts=*/3);
      const double wait_s = std::max(0.0, absl::GetFlag(FLAGS_rejoin_timeout_s));
      const absl::Time until = absl::Now() + absl::Seconds(wait_s);
      // GetServerState lists the freed ranks until a worker registers for
      // each or the wait ends (either way).
      absl::Cleanup end_waits = [&cluster] { cluster.ClearRejoinWaits(); };
      std::string lost_names;
      std::vector<WorkerRecord> before = cluster.Workers();
      for (Rank rank : lost) {
        absl::StrAppend(&lost_names, lost_names.empty() ? "" : ", ", rank.value());
        std::string previous;
        for (const WorkerRecord& w : before) {
          if (w.rank == rank) previous = w.address;
        }
        cluster.ForgetWorker(rank);
        cluster.ExpectRejoin(rank, until, previous);
      }
      cluster.set_lifecycle(ClusterLifecycle::kStarting);
      if (lost.empty()) {
        WEIR_LOG(WARNING) << "every remote worker answers after: " << cause
                          << "; bringing the group up again at a new group epoch";
      } else {
        WEIR_LOG(WARNING) << "lost remote worker rank(s) " << lost_names << " after: " << cause
                          << "; waiting up to " << wait_s << " s for them to register again";
      }
      while (!cluster.WaitAllRegistered(absl::Milliseconds(100))) {
        if (stop.HasBeenNotified()) return absl::CancelledError("stopping");
        if (absl::Now() > until) {
          return absl::UnavailableError(absl::StrCat(
              "no worker registered for rank(s) ", lost_names, " within ", wait_s,
              " s (--rejoin_timeout_s)"));
        }
      }
      RETURN_IF_ERROR(controller.BringUp()) << "bringing the remote group up again";
      return back_to_serving();
    };
  }
  if (recover_workers && local) {
    // A lost worker: the whole local group is replaced (fresh processes on
    // the same flags, registered, brought up on the committed expert map);
    // the step loop then resumes every request from its delivered tokens.
    // A group that fails to come up (a replacement exiting or timing out
    // while a loaded machine starts it slowly) is replaced again.
    driver_options.max_recoveries = absl::GetFlag(FLAGS_max_recoveries);
    driver_options.recover_attempts = 3;
    driver_options.recover =
        [&](const absl::Status& cause) -> absl::StatusOr<std::vector<std::string>> {
      RecoveringScope scope(recovering);
      WEIR_LOG(WARNING) << "replacing the " << world << " local workers after: " << cause;
      set_api_serving(false);
      controller.StopMonitor();
      if (!launcher.KillMatching("worker", absl::Seconds(10))) {
        return absl::DeadlineExceededError("the old workers did not exit within 10 s");
      }
      cluster.ClearWorkers();
      cluster.set_lifecycle(ClusterLifecycle::kStarting);
      for (int r = 0; r < world; ++r) {
        absl::StatusOr<pid_t> pid =
            launcher.Spawn(absl::StrCat("worker ", r), worker_argvs[r]);
        if (!pid.ok()) return pid.status();
      }
      const absl::Time until =
          absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_startup_timeout_s));
      while (!cluster.WaitAllRegistered(absl::Milliseconds(100))) {
        if (stop.HasBeenNotified()) return absl::CancelledError("stopping");
        if (absl::Now() > until) {
          return absl::DeadlineExceededError("the replacement workers did not register");
        }
      }
      RETURN_IF_ERROR(controller.BringUp()) << "bringing up the replacement workers";
      return back_to_serving();
    };
  }
  absl::StatusOr<std::unique_ptr<StepDriver>> driver =
      StepDriver::Create(worker_addresses, driver_options);
  if (!driver.ok()) {
    std::cerr << "weir: cannot start the step loop: " << driver.status() << "\n";
    return shutdown(1);
  }
  RequestLimits request_limits;
  request_limits.vocab_size = model->vocab_size;
  request_limits.max_context_tokens = model->max_context_tokens;
  request_limits.default_max_new_tokens = absl::GetFlag(FLAGS_default_max_new_tokens);
  request_limits.eos_token_ids = driver_options.rank.eos_token_ids;
  inference.SetRequestLimits(request_limits);
  inference.SetDriver(driver->get());
  live_driver = driver->get();
  control.SetDriver(driver->get());
  control_plane.SetDriver(driver->get());

  cluster.set_lifecycle(ClusterLifecycle::kReady);
  set_api_serving(true);
  controller.StartMonitor(on_worker_change);
  const std::string eplb = cluster.eplb_address();
  const std::string input = absl::GetFlag(FLAGS_input);
  // The offline mode's stdout is its results (without --output): the banner
  // goes to stderr there, and the hint to query a server that is about to
  // exit is left out.
  std::ostream& banner = input.empty() ? std::cout : std::cerr;
  banner << "weir ready at " << server->address << " (model " << model->name << ", " << world
         << " workers" << (eplb.empty() ? "" : ", eplb " + eplb)
         << (http_server == nullptr ? "" : ", http " + http_server->address()) << ")";
  if (input.empty()) {
    banner << ". Try: tools/bazel run //tools:weir -- info --server=" << server->address;
  }
  banner << std::endl;

  if (!input.empty()) {
    const int code = RunOffline(input, absl::GetFlag(FLAGS_output), server->address);
    live_driver = nullptr;
    batch_jobs.Stop();
    inference.SetDriver(nullptr);
    control.SetDriver(nullptr);
    control_plane.SetDriver(nullptr);
    (*driver)->Stop();
    return shutdown(code);
  }

  stop.WaitForNotification();
  live_driver = nullptr;
  // Drain: refuse new work, let what is in flight finish (bounded).
  set_api_serving(false);
  const int64_t left =
      (*driver)->Drain(absl::Seconds(std::max(0.0, absl::GetFlag(FLAGS_drain_timeout_s))));
  WEIR_LOG(INFO) << "drained; " << left << " requests still in flight are cancelled";
  batch_jobs.Stop();
  inference.SetDriver(nullptr);
  control.SetDriver(nullptr);
  control_plane.SetDriver(nullptr);
  (*driver)->Stop();
  return shutdown(0);
}

}  // namespace
}  // namespace weir::coordinator

int main(int argc, char** argv) { return weir::coordinator::Run(argc, argv); }
