// specdec-bench: speculative vs autoregressive decoding of the same target,
// interleaved in one process, with the speedup Leviathan's cost model predicts
// from the acceptance and costs measured in the same run.
//
//   specdec-bench                                   embedded synthetic pair, CPU
//   specdec-bench --target t.gguf --draft d.gguf    real models
//   specdec-bench --target t.gguf --draft prompt-lookup
//   specdec-bench --tree auto,3x2x1                 token-tree rows too
//   specdec-bench --export-gguf DIR                 write the synthetic pair as GGUF files
//   specdec-bench --batch 1,2,4,8,16,32             batched decoding per batch size (batch_bench.hpp)
//   specdec-bench --engine llama.cpp --target t.gguf --draft d.gguf
//                                                   the same rows with llama.cpp running the models
//   specdec-bench --engine llama.cpp --target t.gguf --draft d.gguf --batch 1,2,4,8
//                                                   the batched sweep on llama.cpp
//
// Exit status: 0 success, 1 the library reported an error, 2 bad command line.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <utility>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <unistd.h>

#include "specdec/specdec.hpp"

#include "batch_bench.hpp"
#include "batch_report.hpp"
#include "bench_options.hpp"
#include "bench_runner.hpp"
#include "gguf_export.hpp"
#ifdef SPECDEC_WITH_LLAMA_CPP
#include "llama_cpp_setup.hpp"
#endif
#include "machine_info.hpp"
#include "model_setup.hpp"
#include "report_json.hpp"
#include "report_svg.hpp"
#include "report_table.hpp"

namespace {

using namespace specdec::bench;

// "[3/10] T=1 k=4 rep 2/2" on stderr; overwritten in place on a terminal, one
// line each otherwise (logs). Rows that advance in turn start together: one
// line for all of them ("[round 2] T=1: 9 rows in turn, the baseline whole").
class ProgressPrinter {
public:
    explicit ProgressPrinter(bool enabled) : enabled_(enabled), terminal_(isatty(STDERR_FILENO) == 1) {}

    void operator()(const ProgressStep& step) {
        if (!enabled_) return;
        if (step.rows_in_turn > 0) {
            const std::pair<std::size_t, double> block{step.repetition, step.temperature};
            if (block == last_block_) return;
            last_block_ = block;
            const std::string round = step.time_budget_seconds > 0.0
                                          ? "round " + std::to_string(step.repetition)
                                          : "rep " + std::to_string(step.repetition) + "/" + std::to_string(step.repetitions);
            std::fprintf(stderr, "%s[%s] T=%g: %zu rows in turn, the baseline whole%s", terminal_ ? "\r" : "", round.c_str(),
                         step.temperature, step.rows_in_turn, terminal_ ? "   " : "\n");
        } else if (step.time_budget_seconds > 0.0) {  // how many rounds is not known in advance
            std::fprintf(stderr, "%s[round %zu] T=%g k=%s%s", terminal_ ? "\r" : "", step.repetition, step.temperature,
                         step.label.c_str(), terminal_ ? "          " : "\n");
        } else {
            std::fprintf(stderr, "%s[%zu/%zu] T=%g k=%s rep %zu/%zu%s", terminal_ ? "\r" : "", step.step, step.steps,
                         step.temperature, step.label.c_str(), step.repetition, step.repetitions,
                         terminal_ ? "   " : "\n");
        }
        std::fflush(stderr);
    }
    void finish() const {
        if (enabled_ && terminal_) std::fprintf(stderr, "\r%40s\r", "");
    }

private:
    bool enabled_;
    bool terminal_;
    std::pair<std::size_t, double> last_block_{0, -1.0};  // (repetition, temperature) last announced
};

void write_file(const std::string& path, const std::string& content) {
    std::ofstream file(path, std::ios::binary);
    file << content;
    file.close();
    if (!file) throw specdec::Error("cannot write '" + path + "'");
}

// Runs the benchmark on whichever models were set up, then reports.
template <class Draft, class Target>
int benchmark_and_report(Draft& draft, Target& target, BenchInputs inputs, const BenchOptions& options) {
    ProgressPrinter printer(!options.quiet);
    if (!options.quiet && inputs.settings.time_budget_seconds > 0.0)
        std::fprintf(stderr,
                     "%zu configurations, rounds while they fit in %.0f s (%zu to %zu; forward costs timed between rounds)...\n",
                     configurations_of(inputs.settings, kTreeCapable<Draft, Target>).size(), inputs.settings.time_budget_seconds,
                     std::min(inputs.settings.min_repetitions, inputs.settings.repetitions), inputs.settings.repetitions);
    else if (!options.quiet)
        std::fprintf(stderr, "%zu configurations x %zu repetitions (forward costs timed between rounds)...\n",
                     configurations_of(inputs.settings, kTreeCapable<Draft, Target>).size(), inputs.settings.repetitions);
    const BenchReport report = run_benchmark(draft, target, inputs, [&](const ProgressStep& step) { printer(step); });
    printer.finish();

    print_report(std::cout, report,
                 ReportStyle{options.verbose, options.markdown ? ReportFormat::markdown : ReportFormat::text});
    // The files' paths go to stderr: a captured report names no local path.
    if (options.json_path) {
        write_file(*options.json_path, report_to_json(report).dump(2) + "\n");
        if (!options.quiet) std::cerr << "wrote " << *options.json_path << "\n";
    }
    if (options.svg_path) {
        write_file(*options.svg_path, report_to_svg(report));
        if (!options.quiet) std::cerr << "wrote " << *options.svg_path << "\n";
    }
    return 0;
}

// Fails before minutes of measuring, not after, when a report cannot be written.
void check_writable(const std::optional<std::string>& path, const char* flag) {
    if (!path) return;
    std::ofstream file(*path, std::ios::app);
    if (!file) throw UsageError(std::string(flag) + ": cannot write '" + *path + "'");
}

// --export-gguf: the synthetic target and draft of the options, as GGUF files.
int export_gguf(const BenchOptions& options) {
    const std::filesystem::path folder(*options.export_gguf_dir);
    std::error_code error;
    std::filesystem::create_directories(folder, error);
    if (error) throw specdec::Error(folder.string() + ": cannot create the folder: " + error.message());
    if (options.synthetic_size != "tiny" && options.synthetic_size != "100m")
        throw UsageError("--export-gguf: --synthetic-size " + options.synthetic_size + " is generated on the GPU only");
    specdec::SyntheticOptions synthetic;
    synthetic.size = options.synthetic_size;
    synthetic.threads = options.threads;
    const auto kind = options.synthetic_draft ? parse_synthetic_draft_kind(*options.synthetic_draft) : specdec::kDefaultSyntheticDraft;
    const specdec::SyntheticPair pair = specdec::make_synthetic_pair(synthetic, kind);
    for (const auto& [model, file] : {std::pair{&pair.target, "target.gguf"}, std::pair{&pair.draft, "draft.gguf"}}) {
        const std::filesystem::path path = folder / file;
        write_llama_gguf(model->weights(), model->name(), path);
        std::cout << "wrote " << path.string() << " (" << model->name() << ")\n";
    }
    return 0;
}

// --batch: the batched-decoding sweep instead of the single-sequence rows.
template <class Target, class Draft>
int run_batch_sweep(const BenchOptions& options, const BatchModelFactory<Target, Draft>& factory, std::size_t vocab,
                    MachineInfo machine, const ModelInfo& target_info, const ModelInfo& draft_info) {
    const BatchSettings settings = batch_settings_of(options);
    if (!options.quiet)
        std::fprintf(stderr, "%zu batch sizes x %zu variants x %zu rounds, %zu x B requests (at least %zu) of %zu tokens...\n",
                     settings.batch_sizes.size(), settings.fixed_lengths.size() + 2 + settings.auto_variants.size(),
                     settings.rounds, settings.waves, settings.min_requests, settings.new_tokens);
    const bool terminal = isatty(STDERR_FILENO) == 1;
    BatchProgress progress;
    if (!options.quiet)
        progress = [terminal](std::size_t batch, const std::string& label, std::size_t round, std::size_t rounds) {
            std::fprintf(stderr, "%s[round %zu/%zu] B=%zu %s%s", terminal ? "\r" : "", round, rounds, batch, label.c_str(),
                         terminal ? "                    " : "\n");
            std::fflush(stderr);
        };
    BatchReport report = run_batch_benchmark(
        factory, vocab, settings,
        [](std::uint64_t seed, std::size_t vocab, std::size_t tokens) { return seeded_token_prompt(seed, vocab, tokens); },
        progress);
    if (!options.quiet && terminal) std::fprintf(stderr, "\r%60s\r", "");
    report.machine = std::move(machine);
    report.target = target_info;
    report.draft = draft_info;
    print_batch_report(std::cout, report,
                       ReportStyle{options.verbose, options.markdown ? ReportFormat::markdown : ReportFormat::text});
    if (options.json_path) {
        write_file(*options.json_path, batch_report_to_json(report).dump(2) + "\n");
        if (!options.quiet) std::cerr << "wrote " << *options.json_path << "\n";
    }
    if (options.svg_path) {
        write_file(*options.svg_path, batch_report_to_svg(report));
        if (!options.quiet) std::cerr << "wrote " << *options.svg_path << "\n";
    }
    return 0;
}

int run_batch(const BenchOptions& options) {
    if (options.backend == Backend::cuda) {
#ifdef SPECDEC_BENCH_WITH_CUDA
        CudaBatchModelSetup setup = set_up_cuda_batch_models(options);
        const BatchModelFactory<specdec::cuda::CudaLlamaModel, specdec::cuda::CudaLlamaModel> factory{
            [&](std::size_t slots) { return with_sequence_slots(*setup.target, slots); },
            [&](std::size_t slots) { return with_sequence_slots(*setup.draft, slots); }};
        // One host thread drives the device.
        return run_batch_sweep(options, factory, setup.target->vocab_size(),
                               MachineInfo{cpu_model_name(), 1, "cuda", setup.device, load_average(), hardware_threads()},
                               setup.target_info, setup.draft_info);
#else
        throw UsageError("--backend cuda: this specdec-bench was built without CUDA (configure with -DSPECDEC_CUDA=ON)");
#endif
    }
    BatchModelSetup setup = set_up_batch_models(options);
    const BatchModelFactory<specdec::LlamaModel, specdec::LlamaModel> factory{
        [&](std::size_t slots) { return with_sequence_slots(*setup.target, slots, setup.pool); },
        [&](std::size_t slots) { return with_sequence_slots(*setup.draft, slots, setup.pool); }};
    return run_batch_sweep(options, factory, setup.target->vocab_size(),
                           MachineInfo{cpu_model_name(), setup.threads, "cpu", "", load_average(), hardware_threads()},
                           setup.target_info, setup.draft_info);
}

// --engine llama.cpp: the same rows, with llama.cpp running the GGUF models.
int run_llama_cpp([[maybe_unused]] const BenchOptions& options) {
#ifdef SPECDEC_WITH_LLAMA_CPP
    LlamaCppSetup setup = set_up_llama_cpp_models(options);
    BenchInputs inputs;
    // Built for the CPU (scripts/build-llama-cpp.sh), llama.cpp decodes from
    // host memory: the bandwidth is its roofline as it is the own engine's.
    inputs.machine = MachineInfo{cpu_model_name(), setup.threads, "llama.cpp", "", load_average(), hardware_threads()};
    inputs.machine.read_bandwidth = measure_read_bandwidth(setup.threads);
    inputs.target = setup.target_info;
    inputs.draft = setup.draft_info;
    inputs.prompt = setup.prompt;
    inputs.prompt_text = setup.prompt_text;
    inputs.cost_settings.long_prompt_tokens = options.prompt_tokens.value_or(0);
    inputs.settings = RunSettings(options);
    return std::visit([&](auto& draft) { return benchmark_and_report(*draft, *setup.target, inputs, options); }, setup.draft);
#else
    throw specdec::cli::llama_cpp_missing("specdec-bench");
#endif
}

// --engine llama.cpp --batch: the batched sweep with llama.cpp running the two files.
int run_llama_cpp_batch([[maybe_unused]] const BenchOptions& options) {
#ifdef SPECDEC_WITH_LLAMA_CPP
    const LlamaCppBatchSetup setup = set_up_llama_cpp_batch_models(options);
    const std::size_t tokens_per_sequence = std::max(batch_longest_draft(options) + 1, kSyntheticPromptTokens);
    const auto model_over = [&](const specdec::LlamaCppModel& loaded) {
        return [&setup, tokens_per_sequence, model = &loaded](std::size_t slots) {
            return std::make_unique<specdec::LlamaCppModel>(model->new_context(setup.context_options(slots, tokens_per_sequence)));
        };
    };
    // llama.cpp runs a pass whose sequences feed unequal lengths as one pass
    // per distinct length (a cache stream per sequence): the decoders' auto
    // policy hears so from the target (ragged_passes_split) and plans one
    // length for all (docs/llama_cpp.md).
    const BatchModelFactory<specdec::LlamaCppModel, specdec::LlamaCppModel> factory{model_over(*setup.target),
                                                                                   model_over(*setup.draft)};
    return run_batch_sweep(options, factory, setup.target->vocab_size(),
                           MachineInfo{cpu_model_name(), setup.threads, "llama.cpp", "", load_average(), hardware_threads()},
                           setup.target_info, setup.draft_info);
#else
    throw specdec::cli::llama_cpp_missing("specdec-bench");
#endif
}

int run(const BenchOptions& options) {
    if (options.export_gguf_dir) return export_gguf(options);
    if (options.engine == Engine::llama_cpp && !specdec::cli::kBuiltWithLlamaCpp)
        throw specdec::cli::llama_cpp_missing("specdec-bench");
    check_writable(options.json_path, "--json");
    check_writable(options.svg_path, "--svg");
    if (options.engine == Engine::llama_cpp) return options.batch_sizes.empty() ? run_llama_cpp(options) : run_llama_cpp_batch(options);
    if (!options.batch_sizes.empty()) return run_batch(options);
    ModelSetup setup = set_up_models(options);
    BenchInputs inputs;
    inputs.machine = MachineInfo{cpu_model_name(), setup.threads, std::string(to_string(options.backend)), setup.device,
                                 load_average(), hardware_threads()};
    if (options.backend == Backend::cpu) inputs.machine.read_bandwidth = measure_read_bandwidth(setup.threads);
    inputs.target = setup.target_info;
    inputs.draft = setup.draft_info;
    inputs.prompt = setup.prompt;
    inputs.prompt_text = setup.prompt_text;
    inputs.cost_settings.long_prompt_tokens = options.prompt_tokens.value_or(0);
    inputs.settings = RunSettings(options);  // what to measure, as the flags chose it
    inputs.settings.repetition_prompts = setup.repetition_prompts;
    return std::visit(
        [&](auto& draft) { return std::visit([&](auto& target) { return benchmark_and_report(*draft, *target, inputs, options); }, setup.target); },
        setup.draft);
}

}  // namespace

int main(int argc, char** argv) {
    try {
        const BenchOptions options = parse_options(argc, argv);
        if (options.help) {
            std::cout << usage_text();
            return 0;
        }
        const int code = run(options);
#ifdef SPECDEC_PROGRAM_OPTIMIZATION_NOTE
        // After the report, so that a failed run's message stays one line.
        std::cerr << "specdec-bench: note: compiled with " << SPECDEC_PROGRAM_OPTIMIZATION_NOTE
                  << " for the test command (SPECDEC_PROGRAM_OPTIMIZATION): its timings are not the library's;"
                     " scripts/bench.sh rebuilds it at full optimisation\n";
#endif
        return code;
    } catch (const UsageError& error) {
        std::cerr << "specdec-bench: " << specdec::cli::one_line(error.what()) << "\n";
        return 2;
    } catch (const specdec::Error& error) {
        std::cerr << "specdec-bench: error: " << specdec::cli::one_line(error.what()) << "\n";
        return 1;
    } catch (const std::exception& error) {
        std::cerr << "specdec-bench: unexpected error: " << specdec::cli::one_line(error.what()) << "\n";
        return 1;
    }
}
