"""Template of an analysis for `model-explorer analyze --analysis this_file.py`.

Define one class (any name). Every hook is optional; an operator whose own hook is missing goes
to DefaultOpPre/DefaultOpPost. Tensors arrive as dicts:
{'name': str, 'data': numpy array, 'quantparam': {'scale': [...], 'zero_point': [...],
'quantized_dimension': int} or None}. Raise model_explorer.analysis.hooks.StopAnalysis to end
the run early; EndAnalysis is called in any case, so write results there.
"""


class Analysis:
    def __init__(self, args: str = "") -> None:
        self.args = args  # the --analysis-args string

    def StartAnalysis(self) -> None:
        pass

    def EndAnalysis(self) -> None:
        pass

    def StartNetworkExecution(self, inputs) -> None:
        pass

    def EndNetworkExecution(self, outputs) -> None:
        pass

    def DefaultOpPre(self, name, opcode, inputs) -> None:
        pass

    def DefaultOpPost(self, name, opcode, inputs, output) -> None:
        pass

    # Operator hooks receive named arguments, for example:
    def Conv2DPre(self, name, input, filter, bias, stride, padding, dilation, groups) -> None:
        pass

    def Conv2DPost(
        self, name, input, filter, bias, stride, padding, dilation, groups, output
    ) -> None:
        pass

    def FullyConnectedPost(self, name, input, filter, bias, output) -> None:
        pass

    def AddPost(self, name, input, other, output) -> None:
        pass

    # Likewise: Mul, MatMul, Relu, Relu6, Logistic, Tanh, Gelu, Silu, Softmax, MaxPool2D,
    # AveragePool2D, Mean, Concatenation (inputs: a list), BatchNorm, Reshape, Transpose.
