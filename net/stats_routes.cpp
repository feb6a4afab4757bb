#include "net/stats_routes.h"

#include <cstdio>

#include "src/core/json_writer.h"

namespace astrai::net {
namespace {

void latency(JsonWriter& w, const char* name, const LatencySummary& l) {
  w.key(name).begin_object().key("avg").value(l.avg_ms).key("p50").value(l.p50_ms).key("p99").value(l.p99_ms);
  w.key("count").value(l.count).end_object();
}

double uptime(const ServerState& st) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - st.started).count();
}

}  // namespace

std::string stats_json(const ServerState& st) {
  const EngineStats s = st.engine->stats();
  const auto& m = st.metrics;
  JsonWriter w;
  w.begin_object();
  w.key("model").value(st.model_name);
  w.key("requests").begin_object().key("running").value(s.running).key("waiting").value(s.waiting);
  w.key("finished")
      .value(s.finished)
      .key("cancelled")
      .value(s.cancelled)
      .key("failed")
      .value(s.failed)
      .end_object();
  w.key("tokens")
      .begin_object()
      .key("prompt")
      .value(s.prompt_tokens)
      .key("generated")
      .value(s.generated_tokens)
      .end_object();
  w.key("avg_ttft_ms")
      .value(s.ttft.avg_ms)
      .key("p50_ttft_ms")
      .value(s.ttft.p50_ms)
      .key("p99_ttft_ms")
      .value(s.ttft.p99_ms);
  w.key("avg_itl_ms").value(s.itl.avg_ms).key("p99_itl_ms").value(s.itl.p99_ms);
  w.key("avg_decode_tps").value(s.avg_decode_tps);
  w.key("avg_e2e_latency_ms").value(s.e2e.avg_ms);
  w.key("latency_ms").begin_object();
  latency(w, "ttft", s.ttft);
  latency(w, "itl", s.itl);
  latency(w, "e2e", s.e2e);
  latency(w, "queue_wait", s.queue_wait);
  w.end_object();
  w.key("kv")
      .begin_object()
      .key("pages_total")
      .value(s.kv_pages_total)
      .key("pages_used")
      .value(s.kv_pages_used);
  w.key("page_size").value(s.page_size).end_object();
  w.key("prefix_cache").begin_object().key("hit_rate").value(s.prefix_hit_rate);
  w.key("cached_pages").value(s.prefix_cached_pages).end_object();
  w.key("steps")
      .value(s.steps)
      .key("avg_batch_size")
      .value(s.avg_batch_size)
      .key("steps_per_s")
      .value(s.steps_per_s);
  w.key("preemptions").value(s.preemptions);
  w.key("uptime_s").value(uptime(st));
  w.key("server").begin_object();
  w.key("open_connections").value(int64_t(m.open_connections.load()));
  w.key("active_generations").value(int64_t(m.active_generations.load()));
  w.key("http_requests").value(uint64_t(m.http_requests.load()));
  w.key("client_disconnects").value(uint64_t(m.client_disconnects.load()));
  w.key("rejected_overload").value(uint64_t(m.rejected_overload.load()));
  w.key("streamed_tokens").value(uint64_t(m.streamed_tokens.load()));
  w.end_object();
  w.end_object();
  return w.take();
}

namespace {

void metric(std::string& out, const char* name, const char* type, const char* help, double v) {
  char line[512];
  std::snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
  out += line;
}

}  // namespace

std::string metrics_text(const ServerState& st) {
  std::string out;
  const auto& m = st.metrics;
  metric(out, "astrai_up", "gauge", "1 when the model is loaded and the server is ready",
         st.is_ready() ? 1 : 0);
  metric(out, "astrai_uptime_seconds", "gauge", "Seconds since the server started", uptime(st));
  metric(out, "astrai_open_connections", "gauge", "Open client connections",
         double(m.open_connections.load()));
  metric(out, "astrai_http_requests_total", "counter", "HTTP requests routed",
         double(m.http_requests.load()));
  metric(out, "astrai_http_client_errors_total", "counter", "Responses with a 4xx status",
         double(m.http_errors_4xx.load()));
  metric(out, "astrai_http_server_errors_total", "counter", "Responses with a 5xx status",
         double(m.http_errors_5xx.load()));
  metric(out, "astrai_rejected_overload_total", "counter", "Requests refused with 429 (max_concurrent)",
         double(m.rejected_overload.load()));
  metric(out, "astrai_client_disconnects_total", "counter",
         "Generations cancelled because the client went away", double(m.client_disconnects.load()));
  metric(out, "astrai_streamed_tokens_total", "counter", "Tokens delivered to clients",
         double(m.streamed_tokens.load()));
  if (st.is_ready()) {
    const EngineStats s = st.engine->stats();
    metric(out, "astrai_requests_running", "gauge", "Requests being generated", double(s.running));
    metric(out, "astrai_requests_waiting", "gauge", "Requests waiting in the queue", double(s.waiting));
    metric(out, "astrai_requests_finished_total", "counter", "Requests finished", double(s.finished));
    metric(out, "astrai_requests_cancelled_total", "counter", "Requests cancelled", double(s.cancelled));
    metric(out, "astrai_requests_failed_total", "counter", "Requests failed", double(s.failed));
    metric(out, "astrai_prompt_tokens_total", "counter", "Prompt tokens processed", double(s.prompt_tokens));
    metric(out, "astrai_generation_tokens_total", "counter", "Tokens generated", double(s.generated_tokens));
    metric(out, "astrai_decode_tokens_per_second", "gauge", "Average decode throughput", s.avg_decode_tps);
    metric(out, "astrai_kv_pages_capacity", "gauge", "KV cache pages in the pool", double(s.kv_pages_total));
    metric(out, "astrai_kv_pages_used", "gauge", "KV cache pages in use", double(s.kv_pages_used));
    metric(out, "astrai_kv_page_size_tokens", "gauge", "Tokens per KV page", double(s.page_size));
    metric(out, "astrai_prefix_cache_hit_rate", "gauge",
           "Share of prompt tokens served from the prefix cache", s.prefix_hit_rate);
    metric(out, "astrai_prefix_cache_pages", "gauge", "KV pages held by the prefix cache",
           double(s.prefix_cached_pages));
    metric(out, "astrai_engine_steps_total", "counter", "Engine steps run", double(s.steps));
    metric(out, "astrai_batch_size_avg", "gauge", "Average sequences per step", s.avg_batch_size);
    metric(out, "astrai_preemptions_total", "counter", "Requests preempted for lack of KV pages",
           double(s.preemptions));
  }
  m.ttft.write_prometheus(out, "astrai_time_to_first_token_seconds",
                          "Time from request to first token (net side)");
  m.itl.write_prometheus(out, "astrai_inter_token_latency_seconds",
                         "Time between streamed tokens (net side)");
  m.e2e.write_prometheus(out, "astrai_e2e_request_latency_seconds",
                         "Time from request to last token (net side)");
  return out;
}

}  // namespace astrai::net
