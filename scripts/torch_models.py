"""torch_models.py — PyTorch twins of oomlab's zoo models, with oomlab's state_dict keys.

torchvision and Hugging Face already define resnet18/50, vgg11/16 and BertForSequenceClassification
with the keys oomlab copies; this module adds the two zoo models they lack, written from the
papers as oomlab's models/ are (nothing copied from either codebase):
  resnet20 / resnet56  He et al. 2016's CIFAR ResNets (n = 3 / 9), torchvision BasicBlocks with
                       option-B shortcuts (1x1 conv + BN), 16/32/64 planes (models/cifar_resnet.cpp)
  unet / unet-small    Ronneberger et al. 2015 with BatchNorm: encoder.i / bottleneck double convs
                       (conv3x3-BN-ReLU x 2, no conv bias), max-pool 2, up.i ConvTranspose2d(2, 2),
                       decoder.i double convs on cat([skip, up]), final 1x1 conv (models/unet.cpp)
and build(name, classes, input_chw | seq_len, dropout) for every model both sides have.
Imported by torch_parity.py, cpu_vs_torch.py and torch_reference.py (needs torch; torchvision
for the torchvision models; transformers for bert-*).
"""

BERT_SIZES = {  # name -> (layers, hidden, heads), as models/bert.cpp
    "bert-tiny": (2, 128, 2), "bert-mini": (4, 256, 4),
    "bert-small": (4, 512, 8), "bert-base": (12, 768, 12),
}
TORCHVISION = ("vgg11", "vgg11_bn", "vgg16", "vgg16_bn", "resnet18", "resnet34", "resnet50")
CIFAR_RESNETS = {"resnet20": 3, "resnet56": 9}
UNETS = {"unet": 64, "unet-small": 16}


def _cifar_resnet(torch, n, in_channels, classes):
    from torchvision.models.resnet import BasicBlock
    nn = torch.nn

    class CifarResNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(in_channels, 16, 3, 1, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(16)
            self.relu = nn.ReLU(inplace=True)
            inplanes = 16
            for i, planes in enumerate((16, 32, 64)):
                blocks = []
                for b in range(n):
                    stride = 2 if (i > 0 and b == 0) else 1
                    down = None
                    if stride != 1 or inplanes != planes:
                        down = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))
                    blocks.append(BasicBlock(inplanes, planes, stride, down))
                    inplanes = planes
                setattr(self, f"layer{i + 1}", nn.Sequential(*blocks))
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(64, classes)

        def forward(self, x):
            x = self.relu(self.bn1(self.conv1(x)))
            x = self.layer3(self.layer2(self.layer1(x)))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    return CifarResNet()


def _unet(torch, base, depth, in_channels, classes):
    nn = torch.nn

    def double_conv(i, o):
        return nn.Sequential(nn.Conv2d(i, o, 3, padding=1, bias=False), nn.BatchNorm2d(o), nn.ReLU(inplace=True),
                             nn.Conv2d(o, o, 3, padding=1, bias=False), nn.BatchNorm2d(o), nn.ReLU(inplace=True))

    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = nn.Sequential()
            c = in_channels
            for i in range(depth):
                self.encoder.append(double_conv(c, base << i))
                c = base << i
            self.pool = nn.MaxPool2d(2, 2)
            self.bottleneck = double_conv(c, base << depth)
            c = base << depth
            self.up, self.decoder = nn.Sequential(), nn.Sequential()
            for _ in range(depth):
                self.up.append(nn.ConvTranspose2d(c, c // 2, 2, 2))
                self.decoder.append(double_conv(c, c // 2))
                c //= 2
            self.final = nn.Conv2d(c, classes, 1)

        def forward(self, x):
            skips = []
            for enc in self.encoder:
                skips.append(enc(x))
                x = self.pool(skips[-1])
            x = self.bottleneck(x)
            for up, dec in zip(self.up, self.decoder):
                x = dec(torch.cat([skips.pop(), up(x)], 1))
            return self.final(x)

    return UNet()


def build(torch, name, classes, input_chw=(3, 224, 224), seq_len=128, dropout=0.1):
    """The PyTorch model for oomlab's zoo name (train mode, default init, float32)."""
    if name in TORCHVISION:
        import torchvision
        return getattr(torchvision.models, name)(weights=None, num_classes=classes)
    if name in CIFAR_RESNETS:
        return _cifar_resnet(torch, CIFAR_RESNETS[name], input_chw[0], classes)
    if name in UNETS:
        return _unet(torch, UNETS[name], 4, input_chw[0], classes)
    if name in BERT_SIZES:
        from transformers import BertConfig, BertForSequenceClassification
        layers, hidden, heads = BERT_SIZES[name]
        if seq_len > 512:
            raise ValueError(f"seq_len {seq_len} exceeds max_positions 512")
        cfg = BertConfig(vocab_size=30522, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                         intermediate_size=4 * hidden, max_position_embeddings=512, type_vocab_size=2,
                         hidden_act="gelu", layer_norm_eps=1e-12, num_labels=classes,
                         hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout,
                         attn_implementation="eager")  # matmul + softmax, as oomlab's attention
        return BertForSequenceClassification(cfg)
    raise ValueError(f"no PyTorch twin for {name!r}; one of "
                     + ", ".join(sorted(TORCHVISION + tuple(CIFAR_RESNETS) + tuple(UNETS) + tuple(BERT_SIZES))))
