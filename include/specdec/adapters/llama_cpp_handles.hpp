#pragma once
// The llama.cpp objects one LlamaCppModel runs on: a model and one context
// over it, each either owned (freed here, the context before its model) or
// the caller's (LlamaCppModel::borrow; never freed here). An owned model is
// shared with the contexts LlamaCppModel::new_context makes over it and is
// freed with the last of them. Moving keeps the order: a context is always
// released before the model under it.
#include <memory>
#include <utility>

#include <llama.h>

namespace specdec::llama_cpp {

namespace detail {
// Frees an owned context; a borrowed one is left alone.
struct ContextFree {
    bool owned = true;
    void operator()(llama_context* c) const {
        if (owned) llama_free(c);
    }
};
}  // namespace detail

class Handles {
public:
    Handles() = default;

    // Takes `context` (freed here) over the shared `model`.
    Handles(std::shared_ptr<llama_model> model, llama_context* context)
        : model_(std::move(model)), context_(context, detail::ContextFree{true}) {}

    // The caller's model and context: used, never freed.
    [[nodiscard]] static Handles borrowed(llama_model* model, llama_context* context) {
        Handles h;
        h.model_ = std::shared_ptr<llama_model>(model, [](llama_model*) {});
        h.context_ = std::unique_ptr<llama_context, detail::ContextFree>(context, detail::ContextFree{false});
        return h;
    }

    Handles(Handles&&) noexcept = default;
    Handles& operator=(Handles&& other) noexcept {
        if (this != &other) {
            context_.reset();  // before the model it runs on
            model_ = std::move(other.model_);
            context_ = std::move(other.context_);
        }
        return *this;
    }
    Handles(const Handles&) = delete;
    Handles& operator=(const Handles&) = delete;
    ~Handles() { context_.reset(); }

    [[nodiscard]] llama_model* model() const { return model_.get(); }
    [[nodiscard]] llama_context* context() const { return context_.get(); }
    // For a context of its own over the same weights (new_context).
    [[nodiscard]] const std::shared_ptr<llama_model>& shared_model() const { return model_; }
    [[nodiscard]] bool owns_context() const { return context_.get_deleter().owned; }

private:
    std::shared_ptr<llama_model> model_;
    std::unique_ptr<llama_context, detail::ContextFree> context_;
};

}  // namespace specdec::llama_cpp
