"""An analysis written to dalgona's conventions, for the tests: the class is named as the file
and built without arguments, StartAnalysis gets the --analysis_args string, every hook takes
its arguments by position (named unlike dalgona's documentation on purpose), and a helper
module beside this file is imported."""

import tensor_summary


class TensorLog:
    def StartAnalysis(self, args):
        self.args = args
        self.calls = []  # (hook, operator name) in the order called
        self.ops = []  # one summary per operator, from its Post hook
        self.networks = []

    def StartNetworkExecution(self, tensors):
        self.networks.append({"inputs": tensors})

    def EndNetworkExecution(self, tensors):
        self.networks[-1]["outputs"] = tensors

    def Conv2DPre(self, n, a, b, c, pad, st, dil, act):
        self.calls.append(("pre", n))

    def Conv2DPost(self, n, a, b, c, pad, st, dil, out, act):
        self.calls.append(("post", n))
        self.ops.append(tensor_summary.summary(n, "Conv2D", [a, b, c], [out], pad, st, dil, act))

    def DepthwiseConv2DPre(self, n, a, b, c, pad, st, mult, dil, act):
        self.calls.append(("pre", n))

    def DepthwiseConv2DPost(self, n, a, b, c, pad, st, mult, dil, out, act):
        self.calls.append(("post", n))
        summary = tensor_summary.summary(n, "DepthwiseConv2D", [a, b, c], [out], pad, st, dil, act)
        summary["depth_multiplier"] = mult
        self.ops.append(summary)

    def AddPre(self, n, a, b, act):
        self.calls.append(("pre", n))

    def AddPost(self, n, a, b, out, act):
        self.calls.append(("post", n))
        self.ops.append(tensor_summary.summary(n, "Add", [a, b], [out], fused_act=act))

    def FullyConnectedPre(self, n, a, w, b, act):
        self.calls.append(("pre", n))

    def FullyConnectedPost(self, n, a, w, b, out, act):
        self.calls.append(("post", n))
        self.ops.append(
            tensor_summary.summary(n, "FullyConnected", [a, w, b], [out], fused_act=act)
        )

    def TransposeConvPre(self, n, a, f, shape, b, pad, st):
        self.calls.append(("pre", n))

    def TransposeConvPost(self, n, a, f, shape, b, pad, st, out):
        self.calls.append(("post", n))
        summary = tensor_summary.summary(n, "TransposeConv", [a, f, b], [out], pad, st)
        summary["output_shape"] = shape
        self.ops.append(summary)

    def DefaultOpPre(self, n, opcode, tensors):
        self.calls.append(("pre", n))

    def DefaultOpPost(self, n, opcode, tensors, outs):
        self.calls.append(("post", n))
        self.ops.append(tensor_summary.summary(n, opcode, tensors, outs))

    def EndAnalysis(self):
        if self.args:
            tensor_summary.write_counts(self.args, self.ops)
