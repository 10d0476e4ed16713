/* gpt_svg.h - loss.svg for nabla-gpt train (gpt_svg.c). Internal to the
 * tools. It uses only gpt_flags.c; gpt_train.c calls it, not the reverse. */
#ifndef NB_GPT_SVG_H
#define NB_GPT_SVG_H

/* Writes out_dir/loss.svg from out_dir/log.jsonl: the per-iteration loss
 * and the evaluations' train and val loss against iteration. 0 or an exit
 * status after a message. */
int gpt_write_loss_svg(const char *prog, const char *log_path, const char *svg_path);

#endif
