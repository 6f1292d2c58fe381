"""Every visible UI string of the app in English and Chinese. Lesson prose lives in lessons/, not here."""

from __future__ import annotations

import streamlit as st

LANGS = ("zh", "en")

# key: (en, zh)
STRINGS: dict[str, tuple[str, str]] = {
    # navigation
    "nav.start": ("Start", "开始"),
    "nav.lessons": ("Lessons", "课程"),
    "nav.exercises": ("Exercises", "练习"),
    "page.home": ("GPU Memory Lab", "显存实验室"),
    "page.monitoring": ("1 · Monitoring memory", "1 · 显存监控"),
    "page.analysis": ("2 · Analysing memory", "2 · 显存分析"),
    "page.optimization": ("3 · Optimization techniques", "3 · 优化技术"),
    "page.leaks": ("4 · Memory leaks", "4 · 显存泄漏"),
    "page.compare": ("5 · Comparing strategies", "5 · 策略对比"),
    "page.exercise1": ("Exercise 1 · Where does memory go?", "练习 1 · 显存去哪了？"),
    "page.exercise2": ("Exercise 2 · Make it fit", "练习 2 · 让它装得下"),
    "page.exercise3": ("Exercise 3 · Find the leak", "练习 3 · 找出泄漏"),
    # lesson 6: data parallelism across GPUs (app/views/multigpu.py)
    "page.multigpu": ("6 · Several GPUs: DDP, ZeRO, FSDP2", "6 · 多卡：DDP、ZeRO、FSDP2"),
    "phase.wrap": ("wrap (DDP / shard)", "包装（DDP / 切分）"),
    "cat.communication": ("Communication buffers", "通信缓冲区"),
    "multigpu.sandbox": ("Data-parallel sandbox", "数据并行沙盒"),
    "multigpu.strategy": ("Strategy", "策略"),
    "multigpu.world_size": ("World size (processes, one per GPU)", "world size（进程数，每张 GPU 一个）"),
    "multigpu.batch_mode": ("The batch size is", "批大小是"),
    "multigpu.mode.per_rank": ("per rank (global = batch × ranks)", "每卡的（全局 = 批大小 × rank 数）"),
    "multigpu.mode.global": ("global (each rank gets batch / ranks)", "全局的（每个 rank 分到 批大小 / rank 数）"),
    "multigpu.opt.ddp": ("DDP (full replica)", "DDP（完整副本）"),
    "multigpu.opt.ddp_zero1": ("DDP + ZeRO-1 (optimizer state sharded)", "DDP + ZeRO-1（切分优化器状态）"),
    "multigpu.opt.fsdp2_zero2": ("FSDP2, ZeRO-2-like (no reshard after forward)", "FSDP2，类 ZeRO-2（前向后不重新切分）"),
    "multigpu.opt.fsdp2_zero3": ("FSDP2, ZeRO-3 (reshard after forward)", "FSDP2，ZeRO-3（前向后重新切分）"),
    "multigpu.opt.fsdp2_offload": ("FSDP2 + CPU offload (GPU only)", "FSDP2 + CPU 卸载（仅 GPU）"),
    "multigpu.batches": ("{per_rank} per rank, {total} global", "每卡 {per_rank}，全局 {total}"),
    "multigpu.estimate": ("Estimated peak per rank", "每个 rank 的估计峰值"),
    "multigpu.estimate_single": ("One device, same per-rank batch", "单设备、相同每卡批大小"),
    "multigpu.estimate_range": ("On GPUs, NCCL reads each gradient bucket on a stream of its own, and a copy of the "
                                "gradients ({copy}) is freed only when that stream is done: whether it is still "
                                "allocated at the peak depends on timing, so the estimate is a range.",
                                "在 GPU 上，NCCL 在自己的 stream 上读取每个梯度桶，一份梯度副本（{copy}）要等那个 stream "
                                "用完才释放：峰值时它是否还占着显存取决于时序，所以估算是一个范围。"),
    "multigpu.method.replay": ("Estimated by running FSDP2's own code on fake tensors with a fake process group: "
                               "every shard, gathered block and gradient buffer it keeps, without allocating. Under "
                               "CPU offload, what lives in host memory (the shards, their gradients and the "
                               "optimizer step) is left out.",
                               "估算方法：在假张量和假进程组上运行 FSDP2 自己的代码，它保留的每个分片、聚合的块和梯度缓冲"
                               "都被计入，而不真正分配内存。CPU 卸载时，放在主机内存里的东西（分片、它们的梯度和优化器"
                               "步骤）不计入。"),
    "multigpu.method.model": ("Estimated from one device's replay of the per-rank configuration plus DDP's gradient "
                              "buckets: a DDP rank runs the same step on its slice of the batch, with a second copy of "
                              "the gradients. Under ZeRO-1 the optimizer step is replayed on this rank's share of the "
                              "parameters.",
                              "估算方法：对每卡配置做单设备回放，再加上 DDP 的梯度桶：DDP 的每个 rank 在自己那份批次上"
                              "执行同样的一步，外加一份梯度副本。ZeRO-1 下，优化器步骤只在这个 rank 分到的参数上回放。"),
    "multigpu.paper": ("The ZeRO paper's model states per rank for this model (mixed-precision Adam, Ψ = {psi} "
                       "parameters, N = {n}): DDP {ddp}, ZeRO-1 {z1}, ZeRO-2 {z2}, ZeRO-3 {z3}.",
                       "按 ZeRO 论文计算这个模型每个 rank 的模型状态（混合精度 Adam，Ψ = {psi} 个参数，N = {n}）："
                       "DDP {ddp}，ZeRO-1 {z1}，ZeRO-2 {z2}，ZeRO-3 {z3}。"),
    "multigpu.paper_run": ("The same stages for what this configuration trains with (fp32 parameters, gradients and "
                           "optimizer state unless it is pure bf16; AMP keeps all three in fp32): DDP {ddp}, ZeRO-1 "
                           "{z1}, ZeRO-2 {z2}, ZeRO-3 {z3}.",
                           "按这个配置实际的训练方式计算同样的各阶段（除纯 bf16 外，参数、梯度和优化器状态都是 fp32；"
                           "AMP 也把三者都保留为 fp32）：DDP {ddp}，ZeRO-1 {z1}，ZeRO-2 {z2}，ZeRO-3 {z3}。"),
    "multigpu.comm": ("Traffic per rank and step: about {size} ({what}).", "每个 rank 每步的通信量：约 {size}（{what}）。"),
    "multigpu.comm.ddp": ("all-reduce of the gradients", "对梯度做 all-reduce"),
    "multigpu.comm.ddp_zero1": ("all-reduce of the gradients, then a broadcast of each rank's updated parameters",
                                "对梯度做 all-reduce，然后每个 rank 广播自己更新过的参数"),
    "multigpu.comm.fsdp": ("all-gathers of the parameters and a reduce-scatter of the gradients",
                           "对参数做 all-gather，对梯度做 reduce-scatter"),
    "multigpu.run": ("Run on every rank", "在每个 rank 上运行"),
    "multigpu.job": ("{strategy}, {n} ranks", "{strategy}，{n} 个 rank"),
    "multigpu.unavailable": ("This run is not available here: {message}. The recorded runs below show it.",
                             "这里无法运行：{message}。下面的录制结果展示了它。"),
    "multigpu.cpu_note": ("CPU mode: the ranks are processes on this machine talking through gloo. Byte counts are "
                          "real; times are not GPU predictions.",
                          "CPU 模式：各个 rank 是本机上通过 gloo 通信的进程。字节数是真实的；耗时不能代表 GPU。"),
    "multigpu.result": ("This run", "本次运行"),
    "multigpu.device": ("{device} · {n} ranks · backend {backend} · torch {torch}",
                        "{device} · {n} 个 rank · 后端 {backend} · torch {torch}"),
    "multigpu.rank": ("rank {rank}", "rank {rank}"),
    "multigpu.chart.ranks": ("Every rank, phase by phase", "每个 rank，逐阶段"),
    "multigpu.chart.breakdown": ("At each rank's peak, by category", "每个 rank 峰值时刻的分类"),
    "multigpu.chart.compare": ("Strategies side by side: one rank's peak", "策略并排：一个 rank 的峰值"),
    "multigpu.memory": ("Memory", "内存"),
    "multigpu.memory.device": ("Device memory (in the peak)", "设备内存（计入峰值）"),
    "multigpu.memory.host": ("Host memory (CPU offload, not in the peak)", "主机内存（CPU 卸载，不计入峰值）"),
    "multigpu.host_bar": ("{label}: host memory", "{label}：主机内存"),
    "multigpu.host_peak": ("plus {size} of host memory at most (not in the peak)",
                           "另有最多 {size} 主机内存（不计入峰值）"),
    "multigpu.host_mixed": ("This CPU-offload recording counted host and device memory together, so its measured "
                            "categories are left out: they await a recording on 2 GPUs that counts them apart.",
                            "这份 CPU 卸载的录制结果把主机内存和设备内存算在了一起，所以不显示它实测的分类：要等在 2 张 GPU "
                            "上重新录制、把两者分开统计之后才有。"),
    "multigpu.host_estimated": ("The CPU-offload recording counted host and device memory together: its measured bars "
                                "await a recording on 2 GPUs that counts them apart. Its bars here are the estimate's, "
                                "device and host memory per rank.",
                                "CPU 卸载的录制结果把主机内存和设备内存算在了一起：它实测的柱形要等在 2 张 GPU 上重新录制、"
                                "把两者分开统计之后才有。这里画的是它的估算值，每个 rank 的设备内存和主机内存分开。"),
    "multigpu.estimated_bar": ("{label} (estimate)", "{label}（估算）"),
    "multigpu.chart.time": ("Step time with communication", "含通信的单步耗时"),
    "multigpu.peak": ("Peak of rank {rank}", "rank {rank} 的峰值"),
    "multigpu.measured_vs_estimated": ("measured {measured}, estimated {estimated}", "实测 {measured}，估计 {estimated}"),
    "multigpu.update_ok": ("Update check: after one step every gathered parameter agrees with the single-device "
                           "run's to within the rounding of sums taken in another order (largest difference "
                           "{diff:.2g}, largest update {update:.2g}).",
                           "更新检查：一步之后聚合出的每个参数都与单设备运行一致，差异不超过换一种顺序求和带来的舍入误差"
                           "（最大差异 {diff:.2g}，最大更新量 {update:.2g}）。"),
    "multigpu.update_bad": ("Update check failed: some gathered parameters differ from the single-device run's by "
                            "more than the rounding of reordered sums allows (largest difference {diff:.2g}, largest "
                            "update {update:.2g}).",
                            "更新检查未通过：部分聚合出的参数与单设备运行的差异超出了换序求和的舍入误差所能解释的范围"
                            "（最大差异 {diff:.2g}，最大更新量 {update:.2g}）。"),
    "multigpu.errors": ("Some ranks failed: {errors}", "部分 rank 失败：{errors}"),
    "multigpu.oom": ("Rank {rank} ran out of memory in {phase} (step {step}).", "rank {rank} 在 {phase}（第 {step} 步）显存不足。"),
    "multigpu.recorded": ("Recorded: {name} × {n} ({date})", "录制结果：{name} × {n}（{date}）"),
    "multigpu.recorded_cpu": ("Recorded on this project's CPU with gloo, 2 processes ({date})",
                              "在 CPU 上用 gloo、2 个进程录制（{date}）"),
    "multigpu.no_gpu_recording": ("The 2-GPU recordings are not shipped yet: the comparison shows the CPU (gloo) "
                                  "recording, whose byte counts are exact and whose times are not GPU times.",
                                  "尚未附带双 GPU 录制结果：比较图显示的是 CPU（gloo）录制结果，其字节数精确，但耗时不代表 GPU。"),
    "multigpu.fits": ("Smallest setup that fits {capacity} per device: {n} × {strategy} (estimated {peak} per rank).",
                      "每个设备 {capacity} 时能装下的最小配置：{n} × {strategy}（估计每个 rank {peak}）。"),
    "multigpu.fits_none": ("Nothing up to 8 devices fits {capacity} per device: activations are not divided by "
                           "data parallelism; lower the per-rank batch or checkpoint.",
                           "直到 8 个设备都装不下每个设备 {capacity}：数据并行不切分激活值；请降低每卡批大小或使用检查点。"),
    "multigpu.capacity": ("Memory per device (MiB)", "每个设备的显存（MiB）"),
    "multigpu.fits_title": ("What fits", "能装下什么"),
    "multigpu.fits_run": ("Find the fewest devices", "找出最少的设备数"),
    "multigpu.fits_running": ("Replaying the strategies…", "正在回放各策略…"),
    "multigpu.fits_single": ("One device fits it: estimated {peak} of {capacity}.",
                             "一个设备就装得下：估计 {peak}，可用 {capacity}。"),
    "multigpu.fits_how": ("For this sandbox configuration (its batch per rank or in all, as chosen above): one "
                          "device first, then 2 to 8 devices, and at each size the strategies in order of traffic "
                          "(DDP and ZeRO-2 about 2Ψ per step, ZeRO-1 and ZeRO-3 about 3Ψ; with accumulation FSDP2 "
                          "gathers again in every micro-batch), CPU offload last, which needs GPUs. A range counts by "
                          "its top.",
                          "针对上面这个沙盒配置（按上面选择的每卡或全局批大小）：先看一个设备，再看 2 到 8 个设备；"
                          "每种设备数下按通信量从少到多尝试各策略（DDP 和 ZeRO-2 每步约 2Ψ，ZeRO-1 和 ZeRO-3 约 3Ψ；"
                          "梯度累积时 FSDP2 每个微批次都要重新聚合），最后才是需要 GPU 的 CPU 卸载。"
                          "估算是范围时按上限计。"),
    "sidebar.gpu": ("Running on GPU: {name}", "运行在 GPU：{name}"),
    "sidebar.shared_gpu": ("Another GPU Memory Lab server on this machine uses the same GPU: runs of both servers "
                           "share it, so peaks and times can be disturbed. Run one server per GPU.",
                           "这台机器上另一个显存实验室服务器也在使用同一块 GPU：两个服务器的运行会相互干扰峰值和耗时。"
                           "请每块 GPU 只运行一个服务器。"),
    "home.gpu_index": ("GPU {index}", "GPU {index}"),
    "home.gpu_lanes": ("{n} GPUs: one worker each, and every run goes to a free one; a multi-GPU run waits "
                       "until all the GPUs it uses are free.",
                       "{n} 块 GPU：每块一个工作进程，每次运行交给空闲的那块；多 GPU 运行会等到它用到的 GPU 全部空闲。"),
    "sidebar.starting": ("Starting the experiment worker…", "实验工作进程正在启动……"),
    "sidebar.cpu": ("CPU mode: no GPU on this server", "CPU 模式：此服务器没有 GPU"),
    # lesson text
    "lesson.missing": ("This lesson's text is not available yet.", "本课的文字内容暂未提供。"),
    "lesson.fallback": ("This text is not translated yet; shown in the other language.",
                        "此内容尚未翻译，以下为另一种语言的原文。"),
    "prompt.notice": ("What to notice:", "注意观察："),
    "prompt.try": ("Try this:", "动手试试："),
    "prompt.memory.notice": ("Compare the peak bar of each phase with the allocated line: the peak happens inside a phase.",
                             "比较每个阶段的峰值柱与已分配曲线：峰值出现在阶段内部。"),
    "prompt.memory.try": ("Double the batch size and run again: which phases grow?",
                          "把批大小加倍再运行一次：哪些阶段增长了？"),
    "prompt.breakdown.notice": ("Which category dominates at the peak, and does the estimate agree?",
                                "峰值时哪一类占比最大？估算是否一致？"),
    "prompt.breakdown.try": ("Switch the optimizer from Adam to SGD and watch the optimizer state.",
                             "把优化器从 Adam 换成 SGD，观察优化器状态的变化。"),
    "prompt.leak.notice": ("A leak is a staircase: allocated memory at the end of each step keeps rising. A flat "
                           "line is healthy, whatever its height.",
                           "泄漏是一道台阶：每步结束时的已分配显存持续上升。平的线就是健康的，不管它有多高。"),
    "prompt.leak.try": ("Compare the growth per step in the table: which scenario grows by a whole graph, which by "
                        "one scalar, and which not at all?",
                        "对比表格中每步的增长：哪个场景每步多出一整张计算图，哪个只多一个标量，哪个完全不增长？"),
    "prompt.time.notice": ("The bar is the median step time; the whisker spans the 10th to 90th percentile.",
                           "柱为单步时间的中位数；误差线为第 10 到第 90 百分位。"),
    "prompt.time.try": ("Turn on gradient accumulation with a small micro-batch: is it still as fast?",
                        "在较小的微批次下开启梯度累积：速度还一样吗？"),
    # expectations: a prompt checked against the run it sits under
    "expect.checked": ("Checked against this run.", "已用本次运行核对。"),
    "expect.differs": ("this run does not show what the lesson's note describes:",
                       "本次运行与课程说明描述的情况不同："),
    "expect.because_config": ("This run differs from the lesson's preset in: {changes}.",
                              "本次运行与课程预设的不同之处：{changes}。"),
    "expect.because_device": ("The settings are the lesson's preset; the difference comes from the device "
                              "(CPU kernels and the CPU optimizer path differ from CUDA's).",
                              "设置与课程预设相同；差别来自设备（CPU 的内核和优化器实现路径与 CUDA 不同）。"),
    "expect.preset_note": ("The lesson's note (for its preset)", "课程说明（针对预设配置）"),
    "expect.peak_phase": ("the peak is in {actual} (step {step}), not in {expected}.",
                          "峰值出现在 {actual}（第 {step} 步），而不是 {expected}。"),
    "expect.largest": (" The largest category at the peak is {category} ({size}).",
                       "峰值时刻最大的类别是{category}（{size}）。"),
    "expect.share": ("{category} is {actual} of the memory at the peak (the note expects {expected}).",
                     "{category}占峰值显存的 {actual}（说明中预期为 {expected}）。"),
    "expect.phase_growth": ("step {step}'s {phase} added {actual} the parameter memory (the note expects {expected}).",
                            "第 {step} 步的 {phase} 增加了参数显存的 {actual}（说明中预期为 {expected}）。"),
    "expect.step1": ("step 1 peaked at {first}, above step 2's {steady}.",
                     "第 1 步的峰值 {first} 高于第 2 步的 {steady}。"),
    "expect.steady_repeats": ("from step 2 on, the steps do not end with identical allocated memory.",
                              "从第 2 步起，各步结束时的已分配显存并不相同。"),
    "expect.reserved": ("reserved dropped below allocated at some phase.", "某个阶段的保留显存低于已分配显存。"),
    "expect.leak_growth": ("memory grew by {bytes} per step, {actual} one (batch × width) fp32 output "
                           "(the note expects {expected}).",
                           "每步增长 {bytes}，即一个 (batch × width) fp32 输出的 {actual}（说明中预期为 {expected}）。"),
    "expect.value": ("{metric} is {actual} (the note expects {expected}).", "{metric}为 {actual}（说明中预期为 {expected}）。"),
    "expect.largest_category": ("the largest category at the peak is {actual}, not {expected}.",
                                "峰值时刻最大的类别是{actual}，而不是{expected}。"),
    "expect.breakdown_sum": ("the categories add up to {actual} MiB more than the peak they are drawn beside.",
                             "各类别之和比旁边的峰值多 {actual} MiB。"),
    "expect.text_differs": ("This run does not show what the text above says:", "本次运行与上面这段说明不符："),
    "expect.apply": ("Apply: {changes}", "应用：{changes}"),
    "expect.try_held": ("Your run after this change shows what the prompt predicted.",
                        "你按提示修改后的运行，结果与预测一致。"),
    "expect.try_differs": ("Your run after this change differs from the prediction:",
                           "你按提示修改后的运行与预测不同："),
    "metric_name.net_peak_mib": ("the peak above the baseline (MiB)", "高于基线的峰值（MiB）"),
    "metric_name.peak_ratio": ("the peak relative to the run before", "峰值与之前运行之比"),
    "metric_name.peak_saving_pct": ("the peak saved (%)", "峰值节省（%）"),
    "metric_name.saved_mib": ("the memory saved (MiB)", "节省的显存（MiB）"),
    "metric_name.saving_ratio": ("the saving on top of the other technique, over the saving alone",
                                 "叠加在另一种技术之上的节省，与单独使用时节省之比"),
    "metric_name.phase_peak_ratio": ("step 1's peak in this phase over step 2's", "该阶段第 1 步峰值与第 2 步之比"),
    "metric_name.step_time_ratio": ("the step time relative to the run before", "单步时间与之前运行之比"),
    "metric_name.category_ratio": ("the category relative to the run before", "该类别与之前运行之比"),
    "metric_name.category_mib": ("the category at the peak (MiB)", "峰值时刻该类别（MiB）"),
    "metric_name.category_share_pct": ("the category's share of the peak (%)", "该类别占峰值的比例（%）"),
    "metric_name.phase_peak_mib": ("the phase's peak above the baseline (MiB)", "该阶段高于基线的峰值（MiB）"),
    "metric_name.phase_growth_mib": ("what the phase added (MiB)", "该阶段新增的显存（MiB）"),
    "metric_name.step_ms": ("the median step time (ms)", "单步时间中位数（ms）"),
    "metric_name.step_spread_pct": ("the p10–p90 spread of the step time (% of the median)",
                                    "单步时间 p10–p90 范围（占中位数的 %）"),
    "metric_name.tflops": ("the achieved TFLOP/s", "实际达到的 TFLOP/s"),
    "metric_name.tflops_share_pct": ("the achieved TFLOP/s as a share of the device's rate at this precision (%)",
                                     "实际 TFLOP/s 占设备在该精度下算力的比例（%）"),
    "metric_name.category_per": ("the category in units of another", "该类别是另一类别的几倍"),
    "metric_name.phase_peak_gap_params": ("how much higher the later step's phase peak is, in parameter units",
                                          "后一步该阶段峰值高出多少（以参数大小为单位）"),
    "metric_name.phase_peak_pair_ratio": ("the phase's peak relative to the run before", "该阶段峰值与之前运行之比"),
    "metric_name.saved_per_category": ("the memory saved, in units of the category", "节省的显存是该类别的几倍"),
    "metric_name.saved_outputs": ("the memory saved, in fp32 layer outputs", "节省的显存相当于几个 fp32 层输出"),
    "metric_name.saving_vs_category": ("the peak's relative saving over the category's",
                                       "峰值的相对节省与该类别相对节省之比"),
    "metric_name.profile_params": ("the operator's memory in the profiler table, in parameter units",
                                   "profiler 表中该算子的显存（以参数大小为单位）"),
    "metric_name.round_median_ms": ("the median over rounds (ms)", "各轮中位数（ms）"),
    "metric_name.round_spread_pct": ("the spread between rounds (% of the median)", "轮与轮之间的差别（占中位数的 %）"),
    "metric_name.paired_ratio": ("the step time over the baseline's, round by round (median)",
                                 "逐轮单步耗时与基线之比（中位数）"),
    "metric_name.paired_ratio_lo": ("the step time over the baseline's in its lowest round",
                                    "逐轮单步耗时与基线之比的最小值"),
    "metric_name.paired_ratio_hi": ("the step time over the baseline's in its highest round",
                                    "逐轮单步耗时与基线之比的最大值"),
    "metric_name.paired_rounds_slower": ("the rounds in which it was slower", "更慢的轮数"),
    "metric_name.paired_rounds_faster": ("the rounds in which it was faster", "更快的轮数"),
    "metric_name.round_separation_pct": ("the gap between the two ranges over rounds (% of the median)",
                                         "两者各轮范围之间的间隔（占中位数的 %）"),
    "expect.paired_verdict": ("round by round: {actual} (the note expects: {expected}).",
                              "逐轮比较：{actual}（说明中预期：{expected}）。"),
    "verdict_name.slower": ("slower in every round", "每一轮都更慢"),
    "verdict_name.faster": ("faster in every round", "每一轮都更快"),
    "verdict_name.unclear": ("slower in some rounds, faster in others", "有的轮更慢，有的轮更快"),
    "verdict_name.too_few": ("too few rounds for a verdict", "轮数太少，下不了结论"),
    "metric_name.frag_unallocated_mib": ("reserved but unallocated (MiB)", "已保留但未分配（MiB）"),
    "metric_name.frag_reserved_mib": ("reserved at the end (MiB)", "结束时的保留显存（MiB）"),
    "metric_name.frag_allocated_mib": ("allocated at the end (MiB)", "结束时的已分配显存（MiB）"),
    "metric_name.frag_larger_fits": ("larger blocks that fit", "装下的较大块数"),
    "metric_name.driver_outside_mib": ("device memory in use outside PyTorch's allocator (MiB)",
                                       "PyTorch 分配器之外占用的设备内存（MiB）"),
    "metric_name.leak_gc_freed_kib": ("what gc.collect() freed after the loop (KiB)", "循环结束后 gc.collect() 释放的量（KiB）"),
    "metric_name.gc_freed_per_step": ("what gc.collect() freed, in model outputs per step",
                                      "gc.collect() 释放的量，以每步的模型输出计"),
    "metric_name.host_mib": ("the host memory a rank held at most (MiB)", "一个 rank 最多占用的主机内存（MiB）"),
    "metric_name.state_bytes_per_param": ("model-state bytes per parameter after a step",
                                          "一步之后每个参数的模型状态字节数"),
    "metric_name.profile_self_mib": ("the operator's self memory in the profiler table (MiB)",
                                     "profiler 表中该算子的自身显存（MiB）"),
    "metric_name.profile_total_mib": ("the operator's total memory in the profiler table (MiB)",
                                      "profiler 表中该算子的总显存（MiB）"),
    # sandbox
    "sandbox.title": ("Experiment", "实验"),
    "sandbox.reset": ("Reset", "重置"),
    "sandbox.advanced": ("Advanced settings", "高级设置"),
    "sandbox.recorded": ("This exact configuration, recorded on {name}", "完全相同的配置：在 {name} 上录制的结果"),
    "sandbox.recorded_full": ("This configuration at full size ({k}× the width and batch), recorded on {name}",
                              "这个配置的完整尺寸（宽度和 batch 各乘 {k}），在 {name} 上录制的结果"),
    "sizing.cpu": ("No GPU here: runs are {k}× smaller in width and batch ({width} and {batch}, not {full_width} and "
                   "{full_batch}), so they take seconds. The peak's phase and each category's share stay; the bytes are "
                   "about 1/{k2}. The lesson's numbers are the full size on the NVIDIA H200.",
                   "这里没有 GPU：运行的宽度和 batch 都缩小到 1/{k}（{width} 和 {batch}，而不是 {full_width} 和 "
                   "{full_batch}），几秒就能跑完。峰值所在的阶段和各类别的占比不变，字节数约为 1/{k2}。课文中的数字是完整尺寸在 "
                   "NVIDIA H200 上的结果。"),
    "sizing.use_full": ("Full size (slow on a CPU)", "完整尺寸（CPU 上很慢）"),
    "sizing.full_now": ("Full-size preset: the estimate below says how long a run takes on this CPU.",
                        "完整尺寸的预设：下方的估算给出它在这台 CPU 上要跑多久。"),
    "sizing.use_cpu": ("CPU size", "CPU 尺寸"),
    "sandbox.run": ("Run experiment", "运行实验"),
    "sandbox.run_label": ("Training run", "训练运行"),
    "sandbox.bad_preset": ("The lesson's preset is invalid ({message}); using the defaults.",
                           "本课的预设无效（{message}），已改用默认值。"),
    "config.invalid": ("Invalid setting: {message}", "设置无效：{message}"),
    "config.err.range": ("{value} is outside the allowed range [{lo}, {hi}].", "{value} 超出允许范围 [{lo}, {hi}]。"),
    "config.err.choice": ("“{value}” is not one of: {allowed}.", "“{value}”不是可选值之一：{allowed}。"),
    "config.err.batch_accum": ("batch {batch} must be divisible by the accumulation steps {accum} "
                               "(micro-batch = batch / accum).",
                               "批大小 {batch} 必须能被累积步数 {accum} 整除（微批次 = 批大小 / 累积步数）。"),
    "config.err.heads_divide": ("width {width} must be divisible by the number of heads {heads}.",
                                "宽度 {width} 必须能被注意力头数 {heads} 整除。"),
    "config.err.head_dim": ("the head dimension width / heads = {dim} must be a multiple of 8.",
                            "每个头的维度 宽度 / 头数 = {dim}，必须是 8 的倍数。"),
    "config.err.cnn_width": ("for the CNN, width is the channel count: at most 512 (got {width}).",
                             "对 CNN 而言宽度就是通道数：最多 512（当前 {width}）。"),
    "config.err.cnn_layers": ("the CNN has at most 16 conv layers (got {layers}).",
                              "CNN 最多 16 个卷积层（当前 {layers}）。"),
    "config.use_batch": ("Use batch {batch}", "改用批大小 {batch}"),
    "config.use_accum": ("Use accumulation {accum}", "改用累积步数 {accum}"),
    "budget.none": ("none (whole device)", "无（整个设备）"),
    "field.model": ("Model", "模型"),
    "field.layers": ("Layers", "层数"),
    "field.width": ("Width (hidden size / channels)", "宽度（隐藏维度 / 通道数）"),
    "field.batch": ("Batch size", "批大小"),
    "field.seq_len": ("Sequence length", "序列长度"),
    "field.heads": ("Attention heads", "注意力头数"),
    "field.image_size": ("Image size (pixels)", "图像尺寸（像素）"),
    "field.precision": ("Precision", "精度"),
    "field.checkpoint": ("Activation checkpointing", "激活检查点"),
    "field.segments": ("Layers per segment (0 = about √layers)", "每段层数（0 = 约 √层数）"),
    "field.accum": ("Gradient accumulation steps", "梯度累积步数"),
    "field.optimizer": ("Optimizer", "优化器"),
    "field.optimizer_impl": ("Optimizer implementation", "优化器实现"),
    "field.zero_grad_to_none": ("Gradients to None", "梯度置为 None"),
    "field.inplace": ("In-place ReLU", "原地 ReLU"),
    "field.steps": ("Training steps", "训练步数"),
    "field.timing_steps": ("Timing steps", "计时步数"),
    "field.seed": ("Random seed", "随机种子"),
    "field.budget_mb": ("Memory budget (MiB)", "显存预算（MiB）"),
    "field.device": ("Device", "设备"),
    "field.force": ("Run even if the estimate says it won't fit", "即使估算装不下也运行"),
    "help.batch": ("Samples per optimizer step; must be divisible by the accumulation steps.",
                   "每次优化器更新的样本数；必须能被累积步数整除。"),
    "help.accum": ("The batch is split into this many micro-batches; gradients are summed before the step.",
                   "批被拆成这么多个微批次；梯度累加后再更新参数。"),
    "help.precision": (("FP32 is what a script that sets nothing gets: matmuls in full fp32, cuDNN convolutions in "
                        "TF32. Strict FP32 also sets torch.backends.cudnn.allow_tf32 = False; TF32 matmuls also sets "
                        "torch.set_float32_matmul_precision(\"high\")."),
                       "FP32 就是什么都不设置的脚本得到的：矩阵乘法用完整的 fp32，cuDNN 卷积用 TF32。严格 FP32 另外设置 "
                       "torch.backends.cudnn.allow_tf32 = False；TF32 矩阵乘另外设置 "
                       "torch.set_float32_matmul_precision(\"high\")。"),
    "help.checkpoint": ("Recompute activations in backward instead of keeping them.",
                        "在反向传播时重算激活，而不是一直保存。"),
    "help.steps": ("Instrumented steps; step 1 allocates the optimizer state, step 2 shows the steady state.",
                   "带测量的训练步；第 1 步分配优化器状态，第 2 步显示稳定状态。"),
    "help.timing_steps": ("Extra un-instrumented steps used only for the step-time statistics.",
                          "额外的不带测量的训练步，仅用于统计单步时间。"),
    "help.budget_mb": ("Make the device act small: the run fails with out-of-memory beyond this budget.",
                       "让设备“变小”：超出预算时运行会出现显存不足。"),
    "help.zero_grad_to_none": (("optimizer.zero_grad(set_to_none=True): free gradients between steps instead "
                                "of filling them with zeros."),
                               "optimizer.zero_grad(set_to_none=True)：在两步之间释放梯度，而不是填零。"),
    "help.inplace": ("ReLU overwrites its input instead of allocating a new tensor.",
                     "ReLU 直接覆盖输入，而不是分配新张量。"),
    "opt.model.mlp": ("MLP (Linear + ReLU)", "MLP（Linear + ReLU）"),
    "opt.model.cnn": ("CNN (Conv + ReLU)", "CNN（卷积 + ReLU）"),
    "opt.model.transformer": ("Transformer", "Transformer"),
    "opt.precision.fp32": ("FP32 (PyTorch defaults)", "FP32（PyTorch 默认）"),
    "opt.precision.fp32_strict": ("Strict FP32 (no TF32)", "严格 FP32（不用 TF32）"),
    "opt.precision.tf32": ("TF32 matmuls", "TF32 矩阵乘"),
    "opt.precision.amp_fp16": ("AMP fp16 (autocast + GradScaler)", "AMP fp16（autocast + GradScaler）"),
    "opt.precision.amp_bf16": ("AMP bf16 (autocast)", "AMP bf16（autocast）"),
    "opt.precision.bf16": ("Pure bf16 (weights too)", "纯 bf16（权重也是）"),
    "opt.checkpoint.none": ("None", "不使用"),
    "opt.checkpoint.per_layer": ("Every layer", "逐层"),
    "opt.checkpoint.segments": ("Segments", "分段"),
    "opt.optimizer.sgd": ("SGD", "SGD"),
    "opt.optimizer.sgd_momentum": ("SGD + momentum", "SGD + 动量"),
    "opt.optimizer.adam": ("Adam", "Adam"),
    "opt.optimizer.adamw": ("AdamW", "AdamW"),
    "opt.optimizer_impl.default": ("PyTorch default", "PyTorch 默认"),
    "opt.optimizer_impl.foreach": ("foreach (multi-tensor)", "foreach（多张量）"),
    "opt.optimizer_impl.fused": ("fused", "fused（融合）"),
    "opt.optimizer_impl.for-loop": ("for-loop (one tensor at a time)", "for 循环（逐个张量）"),
    "opt.device.auto": ("Automatic (GPU if available)", "自动（有 GPU 则用 GPU）"),
    "opt.device.cuda": ("GPU (CUDA)", "GPU（CUDA）"),
    "opt.device.cpu": ("CPU", "CPU"),
    # estimate
    "estimate.method.replay": ("Traced, not guessed: this configuration's training step was replayed on fake "
                               "tensors (shapes only, no arithmetic), so every tensor it allocates is counted.",
                               "是追踪出来的，不是猜的：这个配置的训练步在假张量（只有形状，没有计算）上重放了一遍，"
                               "它分配的每个张量都被计入。"),
    "estimate.not_predicted": ("Some kernels take scratch memory that is not a tensor and depends on the GPU: cuDNN's "
                               "convolution workspaces and the partial sums of large reductions. This server measures "
                               "each shape once on its GPU; {n} of this configuration's are being measured now and "
                               "are not in this figure yet.",
                               "有些内核会占用不属于张量、且取决于 GPU 的临时显存：cuDNN 的卷积工作区，以及大规模归约的部分和。"
                               "服务器会在 GPU 上对每种形状实测一次；此配置中有 {n} 个正在实测，尚未计入这个数字。"),
    "estimate.workspaces_measured": ("Includes the kernels' scratch memory (cuDNN convolution workspaces, partial sums "
                                     "of large reductions), measured on this GPU for each shape.",
                                     "已包含内核的临时显存（cuDNN 卷积工作区、大规模归约的部分和）：按每种形状在这块 GPU 上实测。"),
    "estimate.title": ("Estimate before running", "运行前估算"),
    "estimate.peak": ("Predicted peak", "预计峰值"),
    "estimate.peak_phase_is": ("The peak is predicted in the “{phase}” phase.", "预计峰值出现在“{phase}”阶段。"),
    "estimate.capacity": ("Available now", "当前可用"),
    "estimate.fits": ("Fits into the available memory.", "可以装进可用显存。"),
    "estimate.no_fit": ("Predicted not to fit: expect an out-of-memory error (a lesson, not a crash).",
                        "预计装不下：可能出现显存不足（这是一课，不会让应用崩溃）。"),
    "estimate.no_capacity": ("No memory limit known to compare with (set a memory budget to get one).",
                             "没有已知的内存上限可比较（可设置显存预算）。"),
    "term.parameters": ("weights and biases: {mib} MiB ({dtype})", "权重与偏置：{mib} MiB（{dtype}）"),
    "term.gradients": ("one gradient per parameter, same dtype; alive from the first backward until "
                       "zero_grad(set_to_none=True)",
                       "每个参数一份同精度梯度；从第一次反向传播一直存活到 zero_grad(set_to_none=True)"),
    "term.optimizer_state": ("{optimizer}: {mib} MiB of state, allocated lazily in the first optimizer step",
                             "{optimizer}：{mib} MiB 状态，在第一次 optimizer.step() 时才分配"),
    "term.activations": ("tensors saved for backward at micro-batch {micro_batch}; grows linearly with the "
                         "micro-batch",
                         "为反向传播保存的张量（微批次 = {micro_batch}），与微批次大小成正比"),
    "term.activations.checkpointed": ("; checkpointing keeps only segment inputs and recomputes one segment at a time",
                                      "；检查点只保存每段的输入，反向时逐段重算"),
    "term.temporaries": ("short-lived buffers at the peak: gradients flowing backward, optimizer scratch "
                         "({mib} MiB for {impl})",
                         "峰值时刻的短命缓冲区：反向传播中的梯度、优化器临时张量（{impl}：{mib} MiB）"),
    "term.autocast_copies": ("low-precision copies of fp32 weights made by autocast and saved for backward",
                             "autocast 生成的低精度权重副本，会被保存到反向传播"),
    "term.other": ("not a tensor: the caching allocator hands out whole blocks (a request counts up to 1 MiB "
                   "more than it asked for), and kernels' scratch memory (cuDNN workspaces, partial sums) measured on this GPU",
                   "非张量：缓存分配器按整块分配（一次请求最多比实际多计约 1 MiB），以及在这块 GPU 上实测的内核临时显存（cuDNN 工作区、部分和）"),
    "term.data": ("the input batch and targets on the device", "放在设备上的输入批次与目标"),
    "estimate.reserved": ("The caching allocator would reserve about {reserved} for these tensors (what an "
                          "out-of-memory error and nvidia-smi see, plus the CUDA context and workspaces).",
                          "缓存分配器大约会为这些张量保留 {reserved}（这是显存不足报错和 nvidia-smi 看到的量，"
                          "另加 CUDA 上下文和工作区）。"),
    "estimate.step_ms": ("Predicted step time (ms)", "预计单步时间（毫秒）"),
    "estimate.run_s": ("Predicted run (s)", "预计整次运行（秒）"),
    "estimate.bound.dispatch": ("Launch-bound: the host issues this step's kernels more slowly than the device runs "
                                "them (a larger batch costs almost no extra time).",
                                "受内核启动限制：主机发出这一步内核的速度比设备执行得还慢（加大 batch 几乎不增加时间）。"),
    "estimate.bound.compute": ("Compute-bound: the step's FLOPs at this device's measured matmul rate dominate.",
                               "受计算限制：这一步的浮点运算量（按本设备实测的矩阵乘速率）占主导。"),
    "estimate.bound.memory": ("Memory-bound: the bytes the kernels read and write dominate.",
                              "受内存带宽限制：内核读写的字节数占主导。"),
    "estimate.terms": ("How the estimate is computed", "估算是怎么算的"),
    # jobs
    "jobs.running": ("Running…", "运行中…"),
    "jobs.queued": ("Waiting in the queue (one experiment runs at a time)…", "排队中（同一时间只运行一个实验）…"),
    "jobs.state.queued": ("queued", "排队中"),
    "jobs.state.running": ("running", "运行中"),
    "jobs.state.done": ("done", "完成"),
    "jobs.state.error": ("failed", "失败"),
    "jobs.state.cancelled": ("cancelled", "已取消"),
    "jobs.position": ("{n} ahead in the queue", "前面还有 {n} 个"),
    "jobs.progress": ("{done} / {total} phases", "{done} / {total} 个阶段"),
    "jobs.elapsed": ("{s} s elapsed", "已用 {s} 秒"),
    "jobs.cancel": ("Cancel", "取消"),
    "jobs.session_full": ("This tab already has as many runs waiting as one learner may have; wait for one to "
                          "finish, or cancel one.",
                          "这个标签页排队中的运行已达到每位学员的上限；请等待其中一个完成，或取消一个。"),
    "jobs.queue_full": ("The class's queue is full right now; try again in a minute.",
                        "全班的排队已满，请一分钟后再试。"),
    "jobs.cancelled": ("The run was cancelled.", "运行已取消。"),
    "jobs.no_result": ("The job ended without a result.", "任务结束但没有结果。"),
    # results
    "result.title": ("Results", "结果"),
    "result.stale": ("These results are for the previous configuration; press Run to measure the current one.",
                     "这些结果对应之前的配置；按“运行实验”来测量当前配置。"),
    "result.cancelled": ("Cancelled: the results are partial.", "已取消：结果不完整。"),
    "result.cached": ("This exact experiment had already run on this server; its result was reused.",
                      "这个完全相同的实验已在本服务器上运行过，直接复用了结果。"),
    "result.gpu": ("Measured on {name} · torch {torch}", "测量设备：{name} · torch {torch}"),
    "result.recorded_at": ("recorded {date}", "录制于 {date}"),
    "result.cpu": (("CPU result ({name}, torch {torch}): tensor memory counted on the CPU. There is no 'reserved' "
                   "memory here, and CPU kernels differ from CUDA ones, so these numbers are not GPU predictions."),
                   ("CPU 结果（{name}，torch {torch}）：在 CPU 上统计张量内存。这里没有“保留”显存，且 CPU 内核与 CUDA "
                   "不同，因此这些数字不能当作 GPU 的预测。")),
    "result.phases_table": ("Phase table", "阶段明细表"),
    "result.memory_summary": ("torch.cuda.memory_summary()", "torch.cuda.memory_summary()"),
    "metric.peak": ("Peak allocated", "峰值已分配"),
    "metric.peak_phase": ("Peak phase", "峰值阶段"),
    "metric.peak_phase_step": ("Peak phase (step {step})", "峰值阶段（第 {step} 步）"),
    "metric.step_ms": ("Step time (ms, median)", "单步时间（毫秒，中位数）"),
    "metric.samples_per_s": ("Samples / s", "样本 / 秒"),
    "metric.baseline": ("{value} of it was allocated before the run began (CUDA context workspaces such as "
                        "cuBLAS'); the estimate and the comparisons count what the experiment adds on top.",
                        "其中 {value} 在运行开始前就已分配（cuBLAS 等 CUDA 工作区）；估算与对比只计算实验在此之上增加的部分。"),
    "metric.tflops": ("Throughput: {value} TFLOPS", "吞吐：{value} TFLOPS"),
    "download.csv": ("Download phases (CSV)", "下载阶段数据（CSV）"),
    "download.json": ("Download full result (JSON)", "下载完整结果（JSON）"),
    "oom.title": ("Out of memory in phase “{phase}” of step {step}. The app keeps working; the memory was given back.",
                  "第 {step} 步的“{phase}”阶段显存不足。应用仍正常运行，显存已释放。"),
    "oom.use_batch": ("Use batch {batch}, then Run to confirm", "改用批大小 {batch}，再点运行实验确认"),
    "oom.in_use": ("In use when it failed", "失败时已占用"),
    "oom.requested": ("Tried to allocate", "尝试分配"),
    "oom.budget": ("Budget", "预算"),
    "oom.budget_caveat": ("On a GPU the budget caps what the process reserves (set_per_process_memory_fraction): "
                          "the workspaces present before the run and any fragmentation count against it, while "
                          "the estimate counts tensor bytes. A run can fail under a budget its estimate fits.",
                          "在 GPU 上，预算限制的是进程保留的显存（set_per_process_memory_fraction）：运行前已有的工作区"
                          "和碎片都算在内，而估算只统计张量字节。所以估算能装下的运行，仍可能在预算内失败。"),
    "oom.would_fit": ("What would fit: by the estimate, batch {batch} fits into {capacity}.",
                      "能装下的配置：按估算，批大小 {batch} 可以装进 {capacity}。"),
    "oom.nothing_fits": (("Even the smallest batch is estimated not to fit into {capacity}: reduce layers or width, "
                         "or use checkpointing / lower precision."),
                         "按估算，即使最小的批也装不进 {capacity}：请减少层数或宽度，或使用检查点 / 低精度。"),
    # charts
    "chart.memory": ("Memory per phase", "各阶段显存"),
    "chart.no_reserved": ("CPU run: only allocated memory exists; there is no caching allocator, so no 'reserved' line.",
                          "CPU 运行：只有已分配内存；没有缓存分配器，因此没有“保留”曲线。"),
    "chart.breakdown": ("What the memory is at the peak: measured vs estimated", "峰值时显存的构成：实测 vs 估算"),
    "chart.time": ("Step time", "单步时间"),
    "chart.this_run": ("This run", "本次运行"),
    "chart.leak": ("Allocated memory per step", "每步已分配显存"),
    "side.pin": ("Pin to compare", "固定对比"),
    "side.pinned": ("Pinned", "固定的"),
    "side.this": ("This one", "当前的"),
    "side.pin_help": ("Keep this result; every later result (on any page, live or recorded) is then shown beside "
                      "it on the same scale.",
                      "保留这个结果；之后的每个结果（任何页面、实时或录制的）都会与它以相同刻度并排显示。"),
    "side.unpin": ("Unpin", "取消固定"),
    "side.heading": ("Side by side with the pinned result (same scale)", "与固定的结果并排（相同刻度）"),
    "side.title_live": ("Run on {device}", "在 {device} 上运行"),
    "side.title_recorded": ("Recorded on {device}", "在 {device} 上录制"),
    "side.net_peak": ("Peak above the baseline", "扣除基线后的峰值"),
    "side.ratio": ("The peak on the right is {ratio}× the peak on the left.", "右侧峰值是左侧的 {ratio} 倍。"),
    "side.differs": ("What differs:", "差异："),
    "side.same_config": ("Same configuration: any difference comes from the device or from noise.",
                         "配置相同：任何差异都来自设备或噪声。"),
    "fit.title": ("What fits a budget", "预算内能装下什么"),
    "fit.explain": ("For each strategy, the largest batch whose estimated peak (above the baseline) stays within "
                    "the budget; then confirm one with a real run.",
                    "对每种策略，找出预计峰值（扣除基线）不超过预算的最大批大小；再用一次真实运行确认其中一个。"),
    "fit.budget": ("Memory budget (MiB)", "显存预算（MiB）"),
    "fit.search": ("Find the largest batch for each strategy", "为每种策略找出最大批大小"),
    "fit.searching": ("Replaying each strategy at several batch sizes…", "正在以多个批大小重放每种策略……"),
    "fit.batch": ("Largest batch", "最大批大小"),
    "fit.none": ("none fits", "都装不下"),
    "fit.best": ("By the estimate, {title} fits the largest batch into {budget}: {batch}.",
                 "按估算，{title} 在 {budget} 内能装下的批最大：{batch}。"),
    "fit.confirm_which": ("Strategy to confirm", "要确认的策略"),
    "fit.confirm": ("Confirm with a real run", "用真实运行确认"),
    "fit.measured": ("{title} at batch {batch}: measured peak {peak} above the baseline, budget {budget}.",
                     "{title}，批大小 {batch}：实测峰值（扣除基线）{peak}，预算 {budget}。"),
    "chart.compare_peak": ("Peak memory per strategy", "各策略的峰值显存"),
    "axis.phase": ("Phase (step·phase)", "阶段（步·阶段）"),
    "axis.mib": ("MiB", "MiB"),
    "axis.operation": ("Allocation or free, in order", "依次的分配或释放"),
    "axis.round": ("Round", "轮次"),
    "axis.paired_ratio": ("Step time over {versus}'s, same round", "单步耗时 ÷ 同一轮 {versus} 的单步耗时"),
    "axis.ms": ("Phase duration, instrumented (ms; synchronised per phase, longer than the timed step)", "阶段耗时，插桩测得（毫秒；每阶段同步，比计时的单步更长）"),
    "axis.series": ("Series", "系列"),
    "axis.category": ("Category", "类别"),
    "axis.source": ("Source", "来源"),
    "axis.run": ("Run", "运行"),
    "axis.step": ("Step", "步"),
    "axis.step_ms": ("Step time (ms)", "单步时间（毫秒）"),
    "axis.allocated_mib": ("Allocated (MiB)", "已分配（MiB）"),
    "axis.net_peak_mib": ("Peak above the pre-run baseline (MiB)", "高于运行前基线的峰值（MiB）"),
    "axis.scenario": ("Scenario", "场景"),
    "series.peak": ("Peak within phase", "阶段内峰值"),
    "series.allocated": ("Allocated at end", "阶段末已分配"),
    "series.reserved": ("Reserved at end", "阶段末保留"),
    "source.measured": ("Measured", "实测"),
    "source.estimated": ("Estimated", "估算"),
    "cat.parameters": ("Parameters", "参数"),
    "cat.gradients": ("Gradients", "梯度"),
    "cat.optimizer_state": ("Optimizer state", "优化器状态"),
    "cat.activations": ("Activations", "激活"),
    "cat.temporaries": ("Temporaries", "临时张量"),
    "cat.autocast_copies": ("Autocast weight copies", "autocast 权重副本"),
    "cat.data": ("Input data", "输入数据"),
    "cat.other": ("Not a tensor (workspaces, rounding)", "非张量（工作区、取整）"),
    "phase.model": ("model", "建模型"),
    "phase.optimizer": ("optimizer", "建优化器"),
    "phase.data": ("data", "数据"),
    "phase.zero_grad": ("zero_grad", "清零梯度"),
    "phase.forward": ("forward", "前向"),
    "phase.backward": ("backward", "反向"),
    "phase.optimizer_step": ("optimizer step", "优化器更新"),
    "col.step": ("Step", "步"),
    "col.as_expected": ("As the lesson expects", "符合课程预期"),
    "col.micro": ("Micro-batch", "微批次"),
    "col.phase": ("Phase", "阶段"),
    "col.allocated_mib": ("Allocated (MiB)", "已分配（MiB）"),
    "col.reserved_mib": ("Reserved (MiB)", "保留（MiB）"),
    "col.peak_mib": ("Peak (MiB)", "峰值（MiB）"),
    "col.ms": ("Instrumented duration (ms)", "插桩耗时（毫秒）"),
    "col.scenario": ("Scenario", "场景"),
    "col.growth_bytes_per_step": ("Growth per step", "每步增长"),
    "col.first_mib": ("First step (MiB)", "第一步（MiB）"),
    "col.last_mib": ("Last step (MiB)", "最后一步（MiB）"),
    "col.gc_freed": ("Then freed by gc.collect()", "随后 gc.collect() 释放"),
    "col.strategy": ("Strategy", "策略"),
    "col.net_peak_mib": ("Peak above baseline (MiB)", "高于基线的峰值（MiB）"),
    "col.abs_peak_mib": ("Peak allocated (MiB)", "峰值已分配（MiB）"),
    "col.step_ms": ("Step time (ms)", "单步时间（毫秒）"),
    "col.p10": ("p10 (ms)", "p10（毫秒）"),
    "col.p90": ("p90 (ms)", "p90（毫秒）"),
    "col.samples_per_s": ("Samples / s", "样本 / 秒"),
    "col.oom": ("Out of memory", "显存不足"),
    "yes": ("yes", "是"),
    "no": ("no", "否"),
    # driver view
    "driver.title": ("Three views of 'used' memory", "“已用显存”的三种视角"),
    "driver.used": ("Driver: total − free (mem_get_info)", "驱动：总量 − 空闲（mem_get_info）"),
    "driver.reserved": ("PyTorch reserved (caching allocator)", "PyTorch 保留（缓存分配器）"),
    "driver.allocated": ("PyTorch allocated (live tensors)", "PyTorch 已分配（存活张量）"),
    "driver.explain": (
        ("`allocated` counts live tensors. `reserved` adds the blocks PyTorch's caching allocator keeps for reuse. "
        "The driver's view (`torch.cuda.mem_get_info`, what nvidia-smi shows) also includes the CUDA context, "
        "cuBLAS/cuDNN workspaces and every other process on the GPU — so it is always the largest."),
        ("`allocated` 统计存活的张量；`reserved` 还包括 PyTorch 缓存分配器留着复用的内存块。驱动的视角"
        "（`torch.cuda.mem_get_info`，即 nvidia-smi 显示的数字）还包括 CUDA 上下文、cuBLAS/cuDNN 工作区以及 GPU "
        "上的其他进程，所以它总是最大的。")),
    "driver.missing": ("This result has no driver reading.", "该结果没有驱动读数。"),
    "driver.cpu": (("CPU run: there is no driver view or reserved memory on the CPU. See the recorded GPU results "
                   "for the three views side by side."),
                   "CPU 运行：CPU 上没有驱动视角，也没有保留内存。请查看录制的 GPU 结果，对比这三种视角。"),
    # home
    "home.map": ("Lesson map", "课程地图"),
    "home.device": ("This server's device", "本服务器的设备"),
    "home.cuda_mode": ("CUDA mode: experiments run on {name}.", "CUDA 模式：实验运行在 {name} 上。"),
    "home.cpu_mode": (("CPU mode: this server has no GPU. Experiments still run for real on the CPU, with tensor "
                      "memory counted per category, but there is no 'reserved' memory and CPU kernels differ from "
                      "CUDA ones. Recorded results from an NVIDIA H200 below show the real GPU numbers."),
                      ("CPU 模式：此服务器没有 GPU。实验仍在 CPU 上真实运行并按类别统计张量内存，但没有“保留”内存，"
                      "而且 CPU 内核与 CUDA 不同。下方录制的 NVIDIA H200 结果展示了真实的 GPU 数字。")),
    "home.total": ("Total memory", "总内存"),
    "home.free": ("Free now", "当前空闲"),
    "home.versions": ("{name} · PyTorch {torch}", "{name} · PyTorch {torch}"),
    "home.cuda_version": ("CUDA {version}", "CUDA {version}"),
    # recorded
    "recorded.title": ("Recorded GPU runs", "在真实 GPU 上录制的运行"),
    "recorded.compare": ("All strategies, recorded on a real GPU", "所有策略：在真实 GPU 上录制的结果"),
    "recorded.explain": (("Results measured by this project's CLI on a real GPU and shipped with the app; the label "
                         "shows the GPU, the PyTorch version and the date."),
                         "由本项目的命令行工具在真实 GPU 上测得并随应用发布；标签注明了 GPU、PyTorch 版本与日期。"),
    "recorded.none": ("No recorded results are shipped yet.", "暂无录制结果。"),
    "recorded.pick": ("Recorded experiment", "录制的实验"),
    # analysis
    "profile.title": ("Profile one training step", "剖析一个训练步"),
    "profile.explain": ("torch.profiler with profile_memory=True over one step: which operators allocate memory.",
                        "在一个训练步上运行 torch.profiler（profile_memory=True）：看哪些算子分配了内存。"),
    "profile.run": ("Run the profiler", "运行剖析器"),
    "profile.cpu": ("CPU mode: sorted by self CPU memory; device columns are empty without a GPU.",
                    "CPU 模式：按自身 CPU 内存排序；没有 GPU 时设备相关的列为空。"),
    "profile.sorted": ("Sorted by “{column}” (click a column header to re-sort).", "按“{column}”排序（点击列标题可重新排序）。"),
    "prof.name": ("Operator", "算子"),
    "prof.calls": ("Calls", "调用次数"),
    "prof.self_device_memory_bytes": ("Self device memory (bytes)", "自身设备内存（字节）"),
    "prof.device_memory_bytes": ("Device memory incl. children (bytes)", "设备内存含子调用（字节）"),
    "prof.self_cpu_memory_bytes": ("Self CPU memory (bytes)", "自身 CPU 内存（字节）"),
    "prof.device_time_us": ("Device time (µs)", "设备时间（微秒）"),
    "prof.cpu_time_us": ("CPU time (µs)", "CPU 时间（微秒）"),
    # optimization
    "opt.title": ("Claim vs measured", "说法 vs 实测"),
    "opt.claim": ("Claim:", "说法："),
    "opt.pick": ("Technique", "技术"),
    "opt.claimed_range": ("The claim, as a number — {metric}: {range}", "说法对应的数字——{metric}：{range}"),
    "opt.measured.peak_saving_pct": ("Peak memory saved", "峰值显存节省"),
    "opt.measured.step_time_ratio": ("Step time vs baseline", "单步时间 / 基线"),
    "opt.source": ("Measured on {source}.", "测量设备：{source}。"),
    "opt.cpu_source": ("CPU (not a GPU prediction)", "CPU（不代表 GPU）"),
    "opt.sized_source": ("{source}, both runs {k}× smaller in width and batch than on a GPU",
                         "{source}，两次运行的宽度和 batch 都只有 GPU 上的 1/{k}"),
    "opt.recorded": ("Recorded on a real GPU", "在真实 GPU 上录制的结果"),
    "opt.recorded_source": ("{name} (recorded)", "{name}（录制）"),
    "opt.holds": ("The claim holds here.", "在这里，这个说法成立。"),
    "opt.one_pair": ("One run of each: a step time moves by tens of percent between runs of the same code, so one "
                     "pair judges no speed claim. The verdict comes from interleaved rounds.",
                     "每个配置只跑了一次：同样的代码，这次和下次运行的单步耗时就会相差百分之几十，所以一对运行判断不了关于速度的"
                     "说法。结论要看交替多轮计时。"),
    "opt.rounds.run": ("Time them in interleaved rounds ({rounds} rounds)", "交替多轮计时（{rounds} 轮）"),
    "opt.measured.paired_ratio": ("Step time vs baseline, round by round (median)",
                                  "单步时间 / 基线，逐轮配对（中位数）"),
    "opt.paired_spread": ("Between {lo}× and {hi}× over {rounds} rounds; the claim: {range}.",
                          "{rounds} 轮中在 {lo}× 到 {hi}× 之间；说法：{range}。"),
    "opt.rounds.holds": ("The claim holds here: every round's ratio lies in the claimed range.",
                         "在这里，这个说法成立：每一轮的比值都落在说法的范围内。"),
    "opt.rounds.not_holds": ("The claim does not hold here: no round's ratio lies in the claimed range.",
                             "在这里，这个说法不成立：没有一轮的比值落在说法的范围内。"),
    "opt.rounds.undecided": ("No verdict: some rounds lie in the claimed range and some outside it, or there are "
                             "fewer than {min} rounds.",
                             "无法判断：有的轮落在说法的范围内，有的在范围外，或者不到 {min} 轮。"),
    "opt.rounds.not_recorded": ("The interleaved rounds for this claim are not recorded on a GPU yet; the recorded "
                                "pair is one run of each and gives no verdict.",
                                "这个说法的交替多轮计时尚未在 GPU 上录制；录制的那一对运行每个只跑了一次，给不出结论。"),
    "opt.not_holds": ("The claim does not hold here.", "在这里，这个说法不成立。"),
    "opt.no_verdict": ("No verdict: the metric could not be measured (out of memory, or no timing steps).",
                       "无法判断：该指标无法测量（显存不足，或计时步数为 0）。"),
    "opt.oom": ("{which} ran out of memory.", "{which}显存不足。"),
    "opt.configs": ("Configurations compared", "对比的配置"),
    "opt.field": ("Setting", "设置"),
    "opt.regime.launch": ("The baseline step took {ms} ms at {tflops} TFLOP/s: launch-bound (well under "
                          "{threshold} TFLOP/s on this class of GPU) — fixed per-kernel costs dominate, so AMP's "
                          "extra cast kernels can make it slower.",
                          "基线单步耗时 {ms} ms，达到 {tflops} TFLOP/s：受内核启动限制（在这类 GPU 上远低于 "
                          "{threshold} TFLOP/s）——每个内核的固定开销占主导，AMP 额外的类型转换内核反而可能让它变慢。"),
    "opt.regime.compute": ("The baseline step took {ms} ms at {tflops} TFLOP/s: compute-bound (at least "
                           "{threshold} TFLOP/s) — the matrix multiplications dominate, which is where "
                           "tensor cores (AMP, TF32) pay.",
                           "基线单步耗时 {ms} ms，达到 {tflops} TFLOP/s：受计算限制（至少 {threshold} TFLOP/s）"
                           "——矩阵乘法占主导，这正是张量核心（AMP、TF32）发挥作用的地方。"),
    "opt.technique": ("With the technique", "使用该技术"),
    "opt.baseline": ("Baseline", "基线"),
    "opt.run": ("Measure the claim (2 runs)", "测量这个说法（运行 2 次）"),
    "opt.estimated": ("Estimated before running: {value}", "运行前的估算：{value}"),
    # leaks
    "leak.title": ("Leak experiment", "泄漏实验"),
    "leak.scenarios": ("Scenarios", "场景"),
    "leak.steps": ("Steps", "步数"),
    "leak.expect": ("Expected:", "预期："),
    "leak.baseline": ("A healthy training loop, for comparison", "作为对照：健康的训练循环"),
    "leak.baseline_explain": ("The lesson's training configuration, measured phase by phase: after step 1, the "
                              "memory at the end of every step is the same.",
                              "本课的训练配置，逐阶段测量：第 1 步之后，每一步结束时的显存都相同。"),
    "leak.recorded": ("All scenarios, recorded on {name}", "所有场景：在 {name} 上录制的结果"),
    "leak.run": ("Run the leak scenarios", "运行泄漏场景"),
    "leak.append_loss_after_backward": ("losses.append(loss) after backward", "backward 之后 losses.append(loss)"),
    "leak.append_loss_no_backward": ("losses.append(loss) without backward", "不做 backward 时 losses.append(loss)"),
    "leak.cache_outputs": ("Caching outputs in the module", "在模块中缓存输出"),
    "leak.cache_outputs_detached": ("Caching outputs with .detach()", "用 .detach() 缓存输出"),
    "leak.no_zero_grad": ("Never calling zero_grad", "从不调用 zero_grad"),
    "leak.fixed": ("Fixed loop (loss.item())", "修正后的循环（loss.item()）"),
    # fragmentation
    # allocation timeline and segments (app/timeline_view.py)
    "timeline.title": ("Memory timeline: every allocation", "显存时间线：每一次分配"),
    "timeline.lesson_title": ("Memory timeline and the allocator's segments", "显存时间线与分配器的段"),
    "timeline.lesson_explain": ("Every allocation and free of the run's setup and measured steps, in order, stacked "
                                "by category; dashed rules mark where each phase starts. Below it, the memory the "
                                "caching allocator reserved at the peak, segment by segment.",
                                "这次运行的准备阶段和测量步中的每一次分配与释放，按顺序、按类别堆叠；虚线标出每个阶段的"
                                "开始。下面是峰值时刻缓存分配器保留的显存，逐段显示。"),
    "timeline.lesson_live": ("Your last run in the sandbox above", "你在上面沙盒中的最近一次运行"),
    "timeline.lesson_none": ("Run the sandbox above to see your own run's timeline here.",
                             "运行上面的沙盒，这里就会显示你自己那次运行的时间线。"),
    "timeline.lesson_recorded": ("The preset, recorded on {name}", "预设配置：在 {name} 上录制的结果"),
    "timeline.source_cuda": ("From the CUDA caching allocator's own history (torch.cuda.memory._record_memory_history); "
                             "a block nobody's tensor explains is “Not a tensor”.",
                             "来自 CUDA 缓存分配器自己的历史记录（torch.cuda.memory._record_memory_history）；"
                             "没有任何张量对应的块记为“非张量”。"),
    "timeline.source_cpu": ("On a CPU: from the lab's storage tracker, which sees every tensor storage an operator "
                            "creates and frees.",
                            "在 CPU 上：来自实验室的存储追踪器，它能看到算子创建和释放的每一个张量存储。"),
    "timeline.coalesced": ("A large run: its {raw} events are shown as {shown}. Neighbouring events of one phase "
                           "are merged so that the peak and the final level stay exact.",
                           "运行较大：{raw} 个事件合并为 {shown} 个显示。同一阶段内相邻的事件被合并，峰值和最终水平保持精确。"),
    "timeline.truncated": ("The allocator kept only its most recent entries: the start of this run is missing.",
                           "分配器只保留了最近的记录：这次运行的开头缺失了。"),
    "timeline.empty": ("No allocation was recorded.", "没有记录到分配。"),
    "timeline.missing": ("This result has no allocation timeline (it was recorded before the timeline existed).",
                         "这个结果没有分配时间线（它是在时间线功能出现之前录制的）。"),
    "timeline.failed": ("The timeline could not be built: {message}", "无法生成时间线：{message}"),
    "timeline.peak": ("Highest level {peak}; at the end {final}; before the run {start}.",
                      "最高 {peak}；结束时 {final}；运行之前 {start}。"),
    "timeline.cat.baseline": ("Before the run (context workspaces)", "运行之前（上下文工作区）"),
    "timeline.axis.event": ("Allocation event (in order)", "分配事件（按顺序）"),
    "timeline.axis.offset": ("Offset inside the segment (MiB)", "段内偏移（MiB）"),
    "timeline.tip.event": ("This event", "本次事件"),
    "timeline.tip.frame": ("Allocated at", "分配位置"),
    "timeline.tip.total": ("All live (MiB)", "全部存活（MiB）"),
    "timeline.tip.segment": ("Segment", "段"),
    "timeline.tip.size": ("Size", "大小"),
    "timeline.segment": ("#{n} · {size}", "#{n} · {size}"),
    "timeline.free": ("Reserved but unallocated", "已保留但未分配"),
    "timeline.allocated": ("Allocated", "已分配"),
    "timeline.segments_title": ("The allocator's segments", "分配器的段"),
    "timeline.at_peak": ("at the peak", "峰值时刻"),
    "timeline.at_end": ("at the end of the recorded steps", "记录的步骤结束时"),
    "timeline.segments_summary": ("{at}: {n} segments, {reserved} reserved, {free} of it unallocated.",
                                  "{at}：{n} 个段，共保留 {reserved}，其中 {free} 未分配。"),
    "timeline.segments_none": ("No segment was recorded.", "没有记录到段。"),
    "timeline.segments_cpu": ("A CPU has no caching allocator: every tensor gets its memory from the operating "
                              "system and gives it back when it dies, so there are no segments to show. Here is the "
                              "recorded GPU run of this lesson's preset instead.",
                              "CPU 没有缓存分配器：每个张量直接向操作系统申请内存，张量销毁时归还，所以没有段可以显示。"
                              "下面改为显示本课预设配置在 GPU 上录制的结果。"),
    "timeline.segments_recorded": ("Recorded on {name}:", "在 {name} 上录制："),
    "timeline.segments_no_recording": ("No recorded GPU segment view is available yet.", "暂时没有录制好的 GPU 段视图。"),
    "timeline.download": ("Download the snapshot (for pytorch.org/memory_viz)", "下载快照（用于 pytorch.org/memory_viz）"),
    "timeline.download_hint": ("Drag the file onto pytorch.org/memory_viz: its Active Memory Timeline shows every "
                               "block, and a click shows the stack that allocated it.",
                               "把文件拖到 pytorch.org/memory_viz 上：它的 Active Memory Timeline 显示每一个块，"
                               "点击一个块就能看到分配它的调用栈。"),
    "timeline.no_snapshot_cpu": ("No snapshot to download: a snapshot is the CUDA caching allocator's record, and a "
                                 "CPU run has no caching allocator.",
                                 "没有可下载的快照：快照是 CUDA 缓存分配器的记录，而 CPU 运行没有缓存分配器。"),
    "timeline.snapshot_gone": ("The raw snapshot of this run is no longer on the server (only the most recent ones "
                               "are kept).", "这次运行的原始快照已不在服务器上（只保留最近的几个）。"),
    # tensor census (app/leak_sandbox.py)
    "census.title": ("Tensor census: what the last step added", "张量普查：最后一步新增了什么"),
    "census.explain": ("Live tensor storages grouped by shape, dtype and device, counted at the end of step {a} and "
                       "of step {b}; the groups that changed come first. A shape is that of the tensor the storage "
                       "was made for; bytes are the storage's real size.",
                       "按形状、数据类型和设备分组的存活张量存储，分别在第 {a} 步和第 {b} 步结束时统计；有变化的组排在最前。"
                       "形状是创建该存储时那个张量的形状；字节数是存储的真实大小。"),
    "census.pick": ("Scenario", "场景"),
    "census.none": ("No census in this result (it was recorded before the census existed).",
                    "这个结果没有普查数据（它是在普查功能出现之前录制的）。"),
    "census.col.shape": ("Shape", "形状"),
    "census.col.dtype": ("dtype", "数据类型"),
    "census.col.device": ("Device", "设备"),
    "census.col.count": ("Tensors", "张量数"),
    "census.col.count_delta": ("Δ tensors per step", "每步张量变化"),
    "census.col.bytes": ("Bytes", "字节"),
    "census.col.bytes_delta": ("Δ bytes per step", "每步字节变化"),
    "census.col.holders": ("Held by", "由谁持有"),
    "census.kind.parameter": ("parameter {name}", "参数 {name}"),
    "census.kind.gradient": ("gradient {name}", "梯度 {name}"),
    "census.kind.optimizer_state": ("optimizer state", "优化器状态"),
    "census.kind.module_attr": ("module attribute {name}", "模块属性 {name}"),
    "census.kind.list": ("Python list {name}", "Python 列表 {name}"),
    "census.kind.variable": ("variable {name}", "变量 {name}"),
    "census.kind.graph": ("autograd graph of {name}", "{name} 的自动求导图"),
    "frag.title": ("Allocator and fragmentation", "缓存分配器与碎片"),
    "frag.explain": ("Runs one allocation pattern twice on the GPU — with the default caching allocator and with "
                     "expandable segments — and reads allocated and reserved after every step.",
                     "在 GPU 上把同一种分配模式运行两次——默认缓存分配器一次，开启 expandable segments 一次——"
                     "每一步之后读取已分配和保留显存。"),
    "frag.pattern": ("Allocation pattern", "分配模式"),
    "frag.run": ("Run on the GPU (both allocator settings)", "在 GPU 上运行（两种分配器设置）"),
    "frag.needs_gpu": ("Fragmentation is a property of the CUDA caching allocator: this needs a GPU. The runs "
                       "recorded on a real GPU are below.",
                       "碎片是 CUDA 缓存分配器的性质：需要 GPU。下面是在真实 GPU 上录制的结果。"),
    "frag.recorded": ("Recorded on {name}", "在 {name} 上录制的结果"),
    "frag.allocator.standard": ("Default allocator", "默认分配器"),
    "frag.allocator.expandable": ("expandable_segments:True", "expandable_segments:True"),
    "frag.chart": ("Allocated (solid) and reserved (dashed) after every operation",
                   "每次操作之后的已分配（实线）与保留（虚线）"),
    "frag.series.allocated": ("Allocated", "已分配"),
    "frag.series.reserved": ("Reserved", "保留"),
    "frag.unallocated": ("Reserved but unallocated", "已保留但未分配"),
    "frag.reserved_end": ("Reserved at the end", "结束时保留"),
    "frag.oom": ("{allocator}: out of memory — the allocator's message:", "{allocator}：显存不足——分配器的原始信息："),
    "frag.segments": ("Segments at the end (the allocator's view)", "结束时的段（分配器视角）"),
    "frag.col.allocator": ("Allocator", "分配器"),
    "frag.col.segment": ("Segment", "段"),
    "frag.col.size": ("Size", "大小"),
    "frag.col.in_use": ("In live blocks", "活跃块占用"),
    "frag.col.free": ("Free inside", "段内空闲"),
    "frag.col.blocks": ("Live blocks", "活跃块数"),
    # interleaved timing rounds
    "rounds.title": ("Fair timing: interleaved rounds", "公平计时：交替多轮"),
    "rounds.explain": ("Every round builds each strategy afresh in a rotating order, warms it up and times "
                       "{steps} steps; {rounds} rounds. A point is one round's median; the black tick is the "
                       "median over rounds.",
                       "每一轮按轮换的顺序重新构建每个策略、预热，再计时 {steps} 步；共 {rounds} 轮。"
                       "每个点是一轮的中位数；黑色短线是各轮中位数的中位数。"),
    "rounds.run": ("Time all strategies in interleaved rounds", "交替多轮计时所有策略"),
    "rounds.recorded": ("Interleaved rounds recorded on {name}", "在 {name} 上录制的交替多轮计时"),
    "rounds.chart_times": ("Each round's median step time", "每一轮的单步耗时中位数"),
    "rounds.line": ("**{name}**: {median} ms over rounds (range {lo}–{hi})",
                    "**{name}**：各轮中位数 {median} 毫秒（范围 {lo}–{hi}）"),
    "rounds.chart_paired": ("Round by round: step time over {versus}'s in the same round",
                            "逐轮比较：单步耗时 ÷ 同一轮 {versus} 的单步耗时"),
    "rounds.paired_explain": ("A point is one round's ratio, the black tick their median, the dashed line 1 (as fast "
                              "as {versus}). Drift between rounds moves both strategies of a round alike and cancels "
                              "in the ratio. A strategy differs from {versus} only when all its points, over at least "
                              "{min} rounds, lie on one side of the line.",
                              "每个点是一轮的比值，黑色短线是它们的中位数，虚线是 1（与 {versus} 一样快）。轮与轮之间的漂移对同一轮"
                              "的两个策略影响相同，在比值里抵消。只有当一个策略的所有点（至少 {min} 轮）都落在虚线同一侧时，它才与 "
                              "{versus} 有差别。"),
    "rounds.paired": ("**{name}** vs {versus}: about {median}× its step time (between {lo}× and {hi}× over {rounds} "
                      "rounds). {verdict}",
                      "**{name}** 对比 {versus}：单步耗时约是它的 {median} 倍（{rounds} 轮中在 {lo} 到 {hi} 倍之间）。{verdict}"),
    "rounds.verdict.slower": ("Slower in all {rounds} rounds: a real difference.",
                              "{rounds} 轮全都更慢：这是真实的差别。"),
    "rounds.verdict.faster": ("Faster in all {rounds} rounds: a real difference.",
                              "{rounds} 轮全都更快：这是真实的差别。"),
    "rounds.verdict.unclear": ("Slower in {slower} and faster in {faster} of {rounds} rounds: no difference this "
                               "measurement can show.",
                               "{rounds} 轮中 {slower} 轮更慢、{faster} 轮更快：这次测量显示不出差别。"),
    "rounds.verdict.too_few": ("Only {rounds} rounds: too few for a verdict (it takes {min}).",
                               "只有 {rounds} 轮：太少，下不了结论（至少要 {min} 轮）。"),
    "rounds.gpu_only": ("GPU only: at this size one round takes minutes on a CPU. The rounds recorded on a GPU are "
                        "below.",
                        "仅限 GPU：这个规模在 CPU 上跑一轮就要好几分钟。下面是在 GPU 上录制的多轮计时。"),
    "rounds.not_recorded": ("These rounds are not recorded on a GPU yet.", "这组多轮计时尚未在 GPU 上录制。"),
    # compare
    "compare.title": ("Strategies", "策略"),
    "compare.none": ("This lesson lists no strategies yet.", "本课暂未列出策略。"),
    "compare.estimated_peak": ("Estimated peak", "估算峰值"),
    "compare.settings": ("Settings (changed from defaults)", "设置（与默认值不同的项）"),
    "compare.run": ("Run all strategies", "运行所有策略"),
    # exercises
    "exercise.hints": ("Hints", "提示"),
    "exercise.answer": ("Reference answer", "参考答案"),
    "exercise.answer_note": ("Try it yourself first; then check with the experiment on the right.",
                             "先自己尝试，再用右侧的实验验证。"),
    # graded exercises (app/grading*.py): progress, exercise 1 (predict), 2 (budget), 3 (leaky loop)
    "exercise.tab.graded": ("Graded exercise", "评分练习"),
    "exercise.tab.free": ("Free experiment", "自由实验"),
    "grade.solved": ("Solved: every check passed", "已完成：所有检查都通过"),
    "grade.progress.exercise1": ("Progress: {done} of {total} predictions right in your best attempt",
                                 "进度：最好的一次有 {done}/{total} 项预测正确"),
    "grade.progress.exercise2": ("Progress: {done} of {total} checks passed (fit, gradients, speed)",
                                 "进度：通过 {done}/{total} 项检查（装得下、梯度、速度）"),
    "grade.progress.exercise3": ("Progress: {done} of {total} checks passed (flat curve, right gradients)",
                                 "进度：通过 {done}/{total} 项检查（曲线平稳、梯度正确）"),
    "ex1.title": ("Graded: predict, then measure", "评分：先预测，再测量"),
    "ex1.intro": ("Set the model (the preset is the course's), then write down what you expect to be alive **at the "
                  "moment of the peak** of a training step, and in which phase that peak is. **Run and grade** runs "
                  "it for real: the measured breakdown at the peak decides, the estimate only explains.",
                  "设置模型（预设就是教程里的模型），然后写下你认为在训练步**峰值那一刻**存活的各类显存，以及峰值出现在"
                  "哪个阶段。**运行并评分**会真实运行它：以实测的峰值构成为准，估算只用来解释。"),
    "ex1.predictions": ("Your predictions, at the peak", "你的预测（峰值时刻）"),
    "ex1.predict": ("{category} (MiB)", "{category}（MiB）"),
    "ex1.predict_phase": ("Phase of the peak", "峰值所在阶段"),
    "ex1.choose": ("Choose a phase", "选择一个阶段"),
    "ex1.placeholder": ("MiB", "MiB"),
    "ex1.tolerance": ("A number is right when it is within {pct} % of the measured value, or within {floor} for small "
                      "ones. The phase is right when it is the peak's phase, or a phase whose own peak is within "
                      "{tie} % of it (a tie).",
                      "数值与实测值相差不超过 {pct} % 即为正确；较小的类别允许相差 {floor}。阶段须与峰值所在阶段一致，"
                      "或者该阶段自身的峰值与总峰值相差不超过 {tie} %（算作并列）。"),
    "ex1.run": ("Run and grade", "运行并评分"),
    "ex1.run_label": ("Exercise 1: graded run", "练习 1：评分运行"),
    "ex1.fix_first": ("Fill in every prediction before running:", "运行前请填好每一项预测："),
    "ex1.err.mib": ("{field}: enter a prediction in MiB, from {lo} to {hi}.",
                    "{field}：请输入以 MiB 为单位的预测，范围 {lo} 到 {hi}。"),
    "ex1.err.phase": ("Phase of the peak: choose the phase you predict.", "峰值所在阶段：请选择你预测的阶段。"),
    "ex1.grade_title": ("{correct} of {total} right", "{total} 项中答对 {correct} 项"),
    "ex1.config_ran": ("Measured: {layers} × Linear({width}), batch {batch}, {optimizer} ({impl}).",
                       "实测配置：{layers} × Linear({width})，batch {batch}，{optimizer}（{impl}）。"),
    "ex1.line": ("yours {yours}, measured {measured} (tolerance {tolerance}), estimated {estimated}",
                 "你的答案 {yours}，实测 {measured}（容差 {tolerance}），估算 {estimated}"),
    "ex1.exact": ("the phase must match", "阶段须一致"),
    "ex1.tie": ("tie with {phases}", "与{phases}并列"),
    "ex1.all_right": ("Every prediction is right.", "每一项预测都正确。"),
    "ex1.miss": ("why the prediction missed:", "为什么没猜中："),
    "ex1.explain_hits": ("Why the right answers are right", "答对的项为什么是对的"),
    "ex1.field.parameters": ("Parameters", "参数"),
    "ex1.field.gradients": ("Gradients", "梯度"),
    "ex1.field.optimizer_state": ("Optimizer state", "优化器状态"),
    "ex1.field.activations": ("Activations", "激活值"),
    "ex1.field.phase": ("Phase of the peak", "峰值所在阶段"),
    "ex1.why.parameters": ("The parameters are what the model phase allocated: {measured} (the estimate: {estimated}). "
                           "They do not depend on the batch.",
                           "参数就是“建模型”阶段分配的显存：{measured}（估算：{estimated}）。它们与 batch 无关。"),
    "ex1.why.parameters_count": ("{layers} layers × ({width}² weights + {width} biases) = {count} numbers × 4 B = "
                                 "{bytes} in fp32.",
                                 "{layers} 层 ×（{width}² 个权重 + {width} 个偏置）= {count} 个数 × 4 B = {bytes}（fp32）。"),
    "ex1.why.gradients_full": ("At the peak ({phase}) the gradients take {measured}, {ratio}× the parameters (the "
                               "estimate: {estimated}): one gradient per parameter, in its dtype, alive from backward "
                               "until the next zero_grad.",
                               "峰值时刻（{phase}）梯度占 {measured}，是参数的 {ratio} 倍（估算：{estimated}）："
                               "每个参数一份梯度、相同的数据类型，从反向开始一直存活到下一次 zero_grad。"),
    "ex1.why.gradients_partial": ("The peak is inside {phase}: backward creates the gradients layer by layer, and "
                                  "{measured} of them ({ratio}× the parameters) existed at that moment (the estimate: "
                                  "{estimated}).",
                                  "峰值出现在{phase}过程中：反向逐层生成梯度，那一刻已经有 {measured}（参数的 {ratio} 倍）"
                                  "（估算：{estimated}）。"),
    "ex1.why.gradients_none": ("At the peak ({phase}) no gradient is alive: zero_grad(set_to_none=True) freed them at "
                               "the start of the step, and backward had not made new ones yet.",
                               "峰值时刻（{phase}）没有任何梯度存活：zero_grad(set_to_none=True) 在这一步开始时释放了"
                               "它们，而反向还没有生成新的梯度。"),
    "ex1.why.state": ("{optimizer} holds {measured} of state at the peak, {ratio}× the parameters (the estimate: "
                      "{estimated}).",
                      "峰值时刻 {optimizer} 的状态占 {measured}，是参数的 {ratio} 倍（估算：{estimated}）。"),
    "ex1.why.state_2": ("Adam and AdamW keep two running averages per parameter (exp_avg and exp_avg_sq), each the "
                        "size of its parameter, created in step 1's optimizer step.",
                        "Adam 和 AdamW 为每个参数保存两份滑动平均（exp_avg 和 exp_avg_sq），每份都和参数一样大，"
                        "在第 1 步的优化器更新中创建。"),
    "ex1.why.state_1": ("SGD with momentum keeps one momentum buffer per parameter, the size of the parameter.",
                        "带动量的 SGD 为每个参数保存一份动量缓冲，和参数一样大。"),
    "ex1.why.state_0": ("Plain SGD keeps no state.", "不带动量的 SGD 不保存任何状态。"),
    "ex1.why.state_other": ("This optimizer's state is as measured above.", "这个优化器的状态以上面的实测值为准。"),
    "ex1.why.activations_gone": ("At the peak ({phase}) no activation is alive: backward frees each saved tensor once "
                                 "it has used it, and the peak came later. One forward pass saved {forward} in this run "
                                 "(what step 2's forward phase added) at micro-batch {micro_batch}: that part grows "
                                 "with the batch.",
                                 "峰值时刻（{phase}）没有任何激活值存活：反向用完每个保存的张量就释放它，而峰值出现在"
                                 "那之后。本次运行中，一次前向在 micro-batch {micro_batch} 下保存了 {forward}（第 2 步"
                                 "“前向”阶段增加的量）：这一部分随 batch 增长。"),
    "ex1.why.activations_alive": ("At the peak ({phase}) {measured} of activations are alive (the estimate: "
                                  "{estimated}): what forward saved for backward at micro-batch {micro_batch}, about "
                                  "{per_sample} per sample, so this part grows linearly with the batch.",
                                  "峰值时刻（{phase}）有 {measured} 的激活值存活（估算：{estimated}）：这是前向在 "
                                  "micro-batch {micro_batch} 下为反向保存的张量，每个样本约 {per_sample}，所以这一部分"
                                  "随 batch 线性增长。"),
    "ex1.why.phase": ("The peak is in {phase} of step {step}; its largest part is {category}, {size}.",
                      "峰值出现在第 {step} 步的{phase}阶段；其中最大的一块是{category}，{size}。"),
    "ex1.why.phase_optimizer_step": ("In the optimizer step the parameters, the gradients and the optimizer state are "
                                     "all alive, and the activations are already freed: in this run that sum is more "
                                     "than anything forward or backward held.",
                                     "在优化器更新时，参数、梯度和优化器状态同时存活，而激活值已经释放：本次运行中，"
                                     "这个总和超过了前向和反向中的任何时刻。"),
    "ex1.why.phase_backward": ("In backward the activations saved by forward are still partly alive while the "
                               "gradients are being made: in this run that overlap is the highest moment.",
                               "反向时，前向保存的激活值还有一部分存活，同时梯度正在生成：本次运行中，这段重叠是最高点。"),
    "ex1.why.phase_forward": ("At the end of forward every activation saved for backward is alive at once: in this "
                              "run that is more than the optimizer step holds.",
                              "前向结束时，为反向保存的激活值全部同时存活：本次运行中，这比优化器更新时占用的还多。"),
    "ex2.title": ("Graded: the budget challenge", "评分：显存预算挑战"),
    "ex2.task": ("Make batch {batch} of the {layers}-layer Linear({width}) model with Adam fit in **{budget}** (the "
                 "measured peak above the baseline). Pick the strategies below. **Run and grade** runs the unoptimized "
                 "baseline, your choice and the best known choice for real, and checks your gradients against fp32.",
                 "让 {layers} 层 Linear({width}) 模型在 batch {batch}、Adam 下装进 **{budget}**（以高出基线的实测峰值"
                 "为准）。在下面选择策略。**运行并评分**会真实运行未优化的基线、你的选择和已知最佳选择，并把你的梯度"
                 "与 fp32 对比。"),
    "ex2.scaled": ("CPU version, scaled. The GPU challenge is batch {gpu_batch} of {gpu_layers} × Linear({gpu_width}) "
                   "in {gpu_budget}, which would take minutes here; this one keeps its proportions (batch = 4 × width) "
                   "at a size that runs in seconds. Its budget comes from the estimate: {gpu_budget} is {share} % of "
                   "the GPU challenge's estimated peak ({gpu_peak}), and the same share of this model's estimated CPU "
                   "peak ({cpu_peak}) is {budget}.",
                   "CPU 缩小版。GPU 上的挑战是 {gpu_layers} × Linear({gpu_width})、batch {gpu_batch} 装进 "
                   "{gpu_budget}，在这里要跑好几分钟；这一版保持相同的比例（batch = 4 × width），几秒就能跑完。预算"
                   "来自估算：{gpu_budget} 是 GPU 挑战估算峰值（{gpu_peak}）的 {share} %，同样的比例乘以本模型在 CPU "
                   "上的估算峰值（{cpu_peak}）就是 {budget}。"),
    "ex2.est_peak": ("Estimated peak", "估算峰值"),
    "ex2.budget": ("Budget", "预算"),
    "ex2.est_fits": ("The estimate says it fits; the run decides.", "估算认为装得下；以实际运行为准。"),
    "ex2.est_no_fit": ("The estimate says it does not fit; you can still run it and see.",
                       "估算认为装不下；你仍然可以运行看看。"),
    "ex2.run": ("Run and grade", "运行并评分"),
    "ex2.searching": ("Finding the best known choice: estimating every option of the grid…",
                      "正在寻找已知最佳选择：逐一估算网格中的每个选项……"),
    "ex2.label.baseline": ("Baseline (fp32, nothing applied)", "基线（fp32，不做任何优化）"),
    "ex2.label.candidate": ("Your choice", "你的选择"),
    "ex2.label.best": ("Best known choice", "已知最佳选择"),
    "ex2.label.guard": ("Gradient check of your choice", "你的选择的梯度检查"),
    "ex2.score": ("Score: {score} / 100", "得分：{score} / 100"),
    "ex2.check.fit": ("Fits: measured peak {peak} ≤ budget {budget}.", "装得下：实测峰值 {peak} ≤ 预算 {budget}。"),
    "ex2.check.no_fit": ("Does not fit: measured peak {peak} > budget {budget}.",
                         "装不下：实测峰值 {peak} > 预算 {budget}。"),
    "ex2.check.correct": ("Gradients right: relative difference from fp32 {rel} ≤ tolerance {tol}.",
                          "梯度正确：与 fp32 的相对差异 {rel} ≤ 容差 {tol}。"),
    "ex2.check.wrong": ("Gradients wrong: relative difference from fp32 {rel} > tolerance {tol}.",
                        "梯度错误：与 fp32 的相对差异 {rel} > 容差 {tol}。"),
    "ex2.check.fast": ("As fast as the best known choice (within {pct} % of its step time).",
                       "和已知最佳选择一样快（步时相差不超过 {pct} %）。"),
    "ex2.check.slow": ("Not yet as fast as the best known choice: a choice that fits, has right gradients and is "
                       "within {pct} % of its step time passes.",
                       "还没有已知最佳选择快：装得下、梯度正确、且步时与它相差不超过 {pct} % 才算通过。"),
    "ex2.why.oom": ("The run ran out of memory.", "这次运行显存不足。"),
    "ex2.why.over": ("The peak is {over} over the budget; its largest part is {category}, {size}.",
                     "峰值超出预算 {over}；其中最大的一块是{category}，{size}。"),
    "ex2.why.no_guard": ("The gradient check did not finish, so correctness is not confirmed.",
                         "梯度检查没有完成，因此无法确认正确性。"),
    "ex2.why.wrong": ("In {precision}, the gradients differ from the fp32 baseline's by {rel} (relative), above that "
                      "precision's tolerance {tol}.",
                      "在 {precision} 下，梯度与 fp32 基线的相对差异为 {rel}，超过了该精度的容差 {tol}。"),
    "ex2.why.speed": ("Your step takes {ms} ms (median), {ratio}× the baseline's {base_ms} ms.",
                      "你的每步耗时 {ms} ms（中位数），是基线 {base_ms} ms 的 {ratio} 倍。"),
    "ex2.why.slower": ("The best known choice took {best_ms} ms: yours took {ratio}× that.",
                       "已知最佳选择耗时 {best_ms} ms：你的是它的 {ratio} 倍。"),
    "ex2.beat": ("Your choice ({ms} ms) was faster than the estimator's pick ({best_ms} ms): the pick ranks the options "
                 "by their predicted step time, and a prediction can miss what the kernels really achieve.",
                 "你的选择（{ms} ms）比估算器选出的（{best_ms} ms）还快：估算器按预测步时给选项排序，而预测未必能反映"
                 "内核的真实表现。"),
    "ex2.best_known.time": ("Best known choice: {choice}. Of the {fitting} options (out of {considered}) whose "
                            "estimated peak fits, it has the shortest predicted step time; its estimated peak is "
                            "{peak}.",
                            "已知最佳选择：{choice}。在估算峰值装得下的 {fitting} 个选项（共 {considered} 个）中，"
                            "它的预测步时最短；估算峰值为 {peak}。"),
    "ex2.best_known.work": ("Best known choice: {choice}. Of the {fitting} options (out of {considered}) whose "
                            "estimated peak fits, it does the least work (FLOPs, then kernels), since this device's "
                            "rates are not known; its estimated peak is {peak}.",
                            "已知最佳选择：{choice}。在估算峰值装得下的 {fitting} 个选项（共 {considered} 个）中，"
                            "它的计算量最少（先比 FLOPs，再比内核数），因为还不知道本设备的速率；估算峰值为 {peak}。"),
    "ex2.none_fits": ("None of the {considered} options fits by the estimate; the lowest estimated peak is {lowest}.",
                      "按估算，{considered} 个选项都装不下；最低的估算峰值为 {lowest}。"),
    "ex2.sep": ("; ", "；"),
    "ex2.run_item": ("**{label}** ({choice}): {line}", "**{label}**（{choice}）：{line}"),
    "ex2.kv": ("{field}: {value}", "{field}：{value}"),
    "ex2.run_line": ("peak above baseline {peak}, fits the budget {fits}, {ms} ms per step (median).",
                     "高出基线的峰值 {peak}，是否装得下预算 {fits}，每步 {ms} ms（中位数）。"),
    "ex3.title": ("Graded: fix the leaky loop", "评分：修好泄漏的循环"),
    "ex3.intro": ("The course's loop, in a model that caches its outputs (the syllabus's third cause of leaks). Tick "
                  "the fixes you would apply. **Run and grade** runs your loop and the course's for {steps} steps. "
                  "It is solved when your curve is flat and the gradients are right.",
                  "教程里的循环，外加一个缓存输出的模型（教程列出的第三种泄漏原因）。勾选你要做的修改。**运行并评分**"
                  "会把你的循环和教程的循环各运行 {steps} 步。曲线平稳且梯度正确，就算完成。"),
    "ex3.fix.keep_item": ("Keep `loss.item()` in `losses`", "在 `losses` 里保存 `loss.item()`"),
    "ex3.fix.keep_detach": ("Keep `loss.detach()` in `losses`", "在 `losses` 里保存 `loss.detach()`"),
    "ex3.fix.zero_grad": ("Call `optimizer.zero_grad(set_to_none=True)` every step",
                          "每一步调用 `optimizer.zero_grad(set_to_none=True)`"),
    "ex3.fix.cache_detach": ("Cache `out.detach()` in the model", "在模型里缓存 `out.detach()`"),
    "ex3.fix.cache_none": ("Cache nothing in the model", "模型里什么都不缓存"),
    "ex3.err.conflict": ("“{first}” and “{second}” change the same line: pick one.",
                         "“{first}”和“{second}”改的是同一行：只能选一个。"),
    "ex3.err.unknown": ("Unknown fix: {fix}.", "未知的修改：{fix}。"),
    "ex3.your_loop": ("The loop that will run", "将要运行的循环"),
    "ex3.rule": ("Flat: it grows by less than {share} % of one output per step ({batch} × {width} × 4 B = {output}, so "
                 "less than {limit}). Right gradients: the gradient the last step used differs from that step's own "
                 "gradient by at most {tol} (relative).",
                 "平稳：每步增长少于一个输出的 {share} %（{batch} × {width} × 4 B = {output}，即少于 {limit}）。梯度"
                 "正确：最后一步所用的梯度与这一步自身的梯度相对差异不超过 {tol}。"),
    "ex3.run": ("Run and grade", "运行并评分"),
    "ex3.label.yours": ("Your loop", "你的循环"),
    "ex3.label.course": ("The course's loop", "教程的循环"),
    "ex3.solved": ("Solved: flat and right", "完成：平稳且正确"),
    "ex3.not_yet": ("Not solved yet", "还没完成"),
    "ex3.check.flat": ("Flat: {growth} per step < {limit}.", "平稳：每步 {growth} < {limit}。"),
    "ex3.check.grows": ("Grows: {growth} per step ≥ {limit}.", "在增长：每步 {growth} ≥ {limit}。"),
    "ex3.check.grads": ("Gradients right: relative error {error} ≤ {tol}.", "梯度正确：相对误差 {error} ≤ {tol}。"),
    "ex3.check.grads_wrong": ("Gradients wrong: relative error {error} > {tol}.", "梯度错误：相对误差 {error} > {tol}。"),
    "ex3.why.grows": ("It keeps {growth} per step: {outputs} × one output ({output}).",
                      "每步多留下 {growth}：相当于 {outputs} 个输出（每个 {output}）。"),
    "ex3.why.keep_loss": ("`losses.append(loss)` keeps the loss tensor, and mse_loss's loss owns a storage of the full "
                          "(batch, width) shape.",
                          "`losses.append(loss)` 留住了损失张量，而 mse_loss 的损失拥有一块完整 (batch, width) 形状的"
                          "存储。"),
    "ex3.why.keep_detach": ("`loss.detach()` is a new tensor on the same storage: it keeps the same bytes as `loss`.",
                            "`loss.detach()` 是同一块存储上的新张量：它留住的字节和 `loss` 一样多。"),
    "ex3.why.cache_keep": ("The model's cache keeps every output it returns.", "模型的缓存留住了它返回的每一个输出。"),
    "ex3.why.cache_detach": ("`out.detach()` shares the output's storage: the cache keeps exactly the same bytes. Only "
                             "not keeping the tensor (or keeping a `.item()` summary) helps.",
                             "`out.detach()` 与输出共享存储：缓存留住的字节一个不少。只有不保留这个张量（或只保留 "
                             "`.item()` 之类的摘要）才有用。"),
    "ex3.why.gradients": ("Without zero_grad every backward adds into .grad: after {steps} steps the gradient the last "
                          "update used is off from that step's own gradient by {error}× its size. That is a "
                          "correctness bug, not a leak.",
                          "没有 zero_grad，每次反向都累加到 .grad 上：{steps} 步之后，最后一次更新所用的梯度与这一步"
                          "自身的梯度相差其大小的 {error} 倍。这是正确性错误，不是泄漏。"),
    "ex3.why.no_gradient": ("This run measured no gradient error.", "这次运行没有测出梯度误差。"),
    # errors
    "error.engine": ("Something went wrong: {message}", "出错了：{message}"),
    "error.would_not_fit": ("The engine refused the run because the estimate is well above the available memory. "
                            "Lower the batch, width or layers — or turn on “Run even if the estimate says it won't "
                            "fit” under Advanced settings to see the out-of-memory error itself.",
                            "估算远超可用内存，引擎拒绝运行。请减小批大小、宽度或层数；或在“高级设置”中打开"
                            "“即使估算装不下也运行”，亲眼看看显存不足的错误。"),
    "error.worker": ("The experiment failed: {message}", "实验失败：{message}"),
    "error.operator_cap": ("Not run: its estimated peak is above this server's limit of {limit} per run, which "
                           "the teacher set for the class. Make the configuration smaller.",
                           "未运行：估算峰值超过了本服务器每次运行 {limit} 的上限（由老师为全班设定）。请把配置调小。"),
    "error.refused": ("Not run: the estimated peak, {peak}, is well above the {capacity} available.",
                      "未运行：估算峰值 {peak} 远超可用的 {capacity}。"),
    "error.force_hint": ("To see the out-of-memory error itself, turn on “Run even if the estimate says it won't "
                         "fit” under Advanced settings.",
                         "想亲眼看看显存不足的错误，可以在“高级设置”中打开“即使估算装不下也运行”。"),
}


def lang() -> str:
    try:
        value = st.session_state.get("lang")
    except Exception:  # noqa: BLE001 - outside a Streamlit run (e.g. plain unit tests)
        value = None
    return value if value in LANGS else "en"


def t(key: str, default: str | None = None, **fmt) -> str:
    pair = STRINGS.get(key)
    if pair is None:
        text = key if default is None else default
    else:
        text = pair[1] if lang() == "zh" else pair[0]
    return text.format(**fmt) if fmt else text
