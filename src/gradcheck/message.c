/* gradcheck/message.c - the sentence a gradient check leaves in
 * res->message: how the check went and, when an op was blamed, which. */
#include "gradcheck/gradcheck_internal.h"

/* The sentence naming the blamed op (empty when there is none). */
static void describe_blame(const nb_gradcheck_result *r, bool y_untracked, char *buf, size_t n) {
    char more[48] = "";
    if (r->blame_count > 1)
        snprintf(more, sizeof more, "; %d more op%s", r->blame_count - 1,
                 r->blame_count > 2 ? "s disagree" : " disagrees");
    char site[128];
    if (r->blame_file)
        snprintf(site, sizeof site, "created at %.96s:%d", r->blame_file, r->blame_line);
    else
        snprintf(site, sizeof site, "no creation site: set one with NB_HERE");
    if (y_untracked)
        snprintf(buf, n, "the output is not on the tape (made with grad disabled, or by a custom "
                         "op that was not recorded), so its gradient is zero");
    else if (r->blame_index < 0)
        buf[0] = '\0';
    else if (r->blame_untracked)
        snprintf(buf, n, "input %d of op #%d '%s' (%s) changes with the checked inputs but is "
                         "not on the tape (made with grad disabled, or by a custom op that was not "
                         "recorded)",
                 r->blame_input, r->blame_index, r->blame_op, site);
    else {
        char input[32] = "";
        if (r->blame_input >= 0)
            snprintf(input, sizeof input, " for its input %d", r->blame_input);
        snprintf(buf, n, "backward of op #%d '%s' (%s) disagrees with finite differences%s "
                         "(along one direction, %.6g by its rule vs %.6g by differences%s)",
                 r->blame_index, r->blame_op, site, input, r->blame_analytic, r->blame_numeric,
                 more);
    }
}

/* "input 2" for an input, "input 3 (parameter 'out_proj.weight')" for a
 * listed parameter: one 0-based numbering, inputs first, as PyTorch's
 * gradcheck(f, params + inputs) numbers its tuple. */
static void input_label(const gc *g, int i, char *buf, size_t n) {
    int k = i - g->n_user;
    const char *name = k >= 0 && g->params ? nb_list_name(g->params, k) : NULL;
    if (name)
        snprintf(buf, n, "input %d (parameter '%.64s')", i, name);
    else
        snprintf(buf, n, "input %d", i);
}

/* The message of a check whose reverse mode passed and forward mode
 * (check_forward_ad) did not: the op blamed, then the worst JVP entry. */
static void forward_message(const gc *g, const nb_gradcheck_opts *o) {
    const nb_gradcheck_result *r = g->res;
    char who[160], along[128], label[96];
    if (r->forward_blame_index >= 0)
        snprintf(who, sizeof who, "forward-mode rule of op #%d '%.63s' disagrees with finite "
                 "differences", r->forward_blame_index, r->forward_blame_op);
    else
        snprintf(who, sizeof who, "forward mode disagrees with finite differences (no op "
                 "blamed: every op's tangent agrees with its output's differences)");
    if (o->fast || r->worst_input < 0) {
        snprintf(along, sizeof along, "along direction %zu", r->worst_index);
    } else {
        input_label(g, r->worst_input, label, sizeof label);
        snprintf(along, sizeof along, "along %s [%zu]", label, r->worst_index);
    }
    snprintf(g->res->message, sizeof g->res->message,
             "gradcheck: %s; worst JVP element out[%zu] %s: forward %.10g vs numeric %.10g "
             "(|error| %.3g > atol %g + rtol %g * |numeric|)",
             who, r->worst_output, along, r->analytic, r->numeric,
             fabs(r->analytic - r->numeric), o->atol, o->rtol);
}

/* res->message from the finished check and blame. */
void nb_gc_write_message(const gc *g, const nb_gradcheck_opts *o, bool y_untracked,
                         nb_status bst) {
    nb_gradcheck_result *res = g->res;
    char check[320], who[448] = "", label[96];
    if (res->passed && o->check_forward_ad)
        snprintf(check, sizeof check, "passed, max |error| %.3g, forward mode %.3g",
                 res->max_abs_err, res->forward_max_abs_err);
    else if (res->passed)
        snprintf(check, sizeof check, "passed, max |error| %.3g", res->max_abs_err);
    else if (o->fast)
        snprintf(check, sizeof check,
                 "v^T J u along direction %zu: analytic %.10g vs numeric %.10g "
                 "(|error| %.3g > atol %g + rtol %g * |numeric|)",
                 res->worst_index, res->analytic, res->numeric,
                 fabs(res->analytic - res->numeric), o->atol, o->rtol);
    else {
        input_label(g, res->worst_input, label, sizeof label);
        snprintf(check, sizeof check,
                 "d out[%zu] / d %s [%zu]: analytic %.10g vs numeric %.10g "
                 "(|error| %.3g > atol %g + rtol %g * |numeric|)",
                 res->worst_output, label, res->worst_index, res->analytic, res->numeric,
                 fabs(res->analytic - res->numeric), o->atol, o->rtol);
    }
    if (o->check_forward_ad && res->backward_passed && !res->forward_passed) {
        forward_message(g, o);
        return;
    }
    describe_blame(res, y_untracked, who, sizeof who);
    if (who[0] && res->passed)
        snprintf(res->message, sizeof res->message, "gradcheck: %.160s, but %.330s", check, who);
    else if (who[0])
        snprintf(res->message, sizeof res->message, "gradcheck: %.310s; worst element %.170s",
                 who, check);
    else
        snprintf(res->message, sizeof res->message, "gradcheck: %.300s%s", check,
                 res->passed           ? ""
                 : bst == NB_ERR_STATE ? " (no op blamed: f recorded a different tape on "
                                         "each call)"
                 : bst != NB_OK        ? " (no op blamed: the search failed)"
                                       : " (no op blamed: every recorded op's backward "
                                         "agrees with finite differences)");
}

